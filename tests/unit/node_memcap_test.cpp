// Memory-cap code paths of the node against a FAKE cgroup tree in a temporary
// directory (the machines this is built on have no cgroup v2 memory
// controller; v1 and the watchdog are exercised for real by
// tests/integration/test_node_memory.sh), plus the /proc parsers and holds.

#include "cq/node/holds.hpp"
#include "cq/node/memcap.hpp"
#include "cq/node/procscan.hpp"
#if defined(__linux__) // the linux platform's cgroups and /proc (node/adapters/linux/)
#include "node/adapters/linux/cgroups.hpp"
#include "node/adapters/linux/procfs.hpp"
#include "scratch_dir.hpp"
#endif

#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace cq::node;
using cq::test::read_text;
using cq::test::temp_dir;

namespace {

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

} // namespace

#if defined(__linux__) // cgroups.cpp: the linux platform's, over a fake tree here
TEST_CASE("cgroup v2 in a fake delegated tree: detection, group limits, OOM and peak") {
  temp_dir t("cq-memcap");
  auto root = t.path;
  put(root / "cgroup.controllers", "cpuset cpu io memory pids\n");
  auto own = root / "user.slice" / "node";
  put(own / "cgroup.controllers", "cpu memory pids\n");
  put(own / "cgroup.subtree_control", "");
  memory_config cfg;
  cfg.cgroup_root = root.string();
  auto setup = detect_memcap(cfg, "0::/user.slice/node\n");
  REQUIRE(setup);
  CHECK(setup->mode == memcap_mode::cgroup_v2);
  CHECK(setup->parent == own);
  CHECK(read_text(own / "cgroup.subtree_control") == "+memory"); // enabled for children

  auto g = create_group(*setup, "a1", 128 << 20);
  REQUIRE(g);
  CHECK(g->dir == own / "cq-a1");
  CHECK(read_text(g->dir / "memory.max") == std::to_string(128 << 20));
  CHECK(read_text(g->dir / "memory.oom.group") == "1");
  CHECK(oom_kills(*g) == std::nullopt); // no memory.events yet
  put(g->dir / "memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 0\n");
  CHECK(oom_kills(*g) == 0u);
  put(g->dir / "memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\n");
  CHECK(oom_kills(*g) == 1u);
  put(g->dir / "memory.peak", "134217728\n");
  CHECK(peak_usage(*g) == 134217728u);
  put(g->dir / "memory.current", "4096\n");
  CHECK(current_usage(*g) == 4096u);
  int fd = open_procs_file(*g);
  CHECK(fd < 0); // the kernel creates cgroup.procs; a fake group has none
  REQUIRE(remove_group(*g));
  CHECK(!fs::exists(g->dir));
}

TEST_CASE("cgroup v2 swap limit is written when swap accounting exists") {
  temp_dir t("cq-memcap");
  put(t.path / "cgroup.controllers", "memory\n");
  put(t.path / "cgroup.subtree_control", "memory\n");
  memory_config cfg;
  cfg.cgroup_root = t.path.string();
  auto setup = detect_memcap(cfg, "0::/\n");
  REQUIRE(setup);
  CHECK(setup->mode == memcap_mode::cgroup_v2);
  CHECK(setup->parent == t.path);
  // Pre-create the group as the kernel would, with a swap file.
  put(t.path / "cq-a2" / "memory.swap.max", "max\n");
  auto g = create_group(*setup, "a2", 1000);
  REQUIRE(g);
  CHECK(read_text(g->dir / "memory.swap.max") == "0");
  CHECK(read_text(g->dir / "memory.max") == "1000");
}

TEST_CASE("cgroup v2 without the memory controller falls back; forcing it is an error") {
  temp_dir t("cq-memcap");
  put(t.path / "unified" / "cgroup.controllers", "pids\n");
  memory_config cfg;
  cfg.cgroup_root = t.path.string();
  auto setup = detect_memcap(cfg, "0::/\n");
  REQUIRE(setup);
  CHECK(setup->mode == memcap_mode::watchdog);
  CHECK(!setup->note.empty());
  cfg.mode = "cgroup_v2";
  auto forced = detect_memcap(cfg, "0::/\n");
  REQUIRE(!forced);
  CHECK(forced.error().message.find("memory controller") != std::string::npos);
  cfg.mode = "watchdog";
  auto wd = detect_memcap(cfg, "");
  REQUIRE(wd);
  CHECK(wd->mode == memcap_mode::watchdog);
  auto g = create_group(*wd, "a3", 1000);
  REQUIRE(g);
  CHECK(g->dir.empty());
}

TEST_CASE("cgroup v1 in a fake tree: the node's own memory group is the parent") {
  temp_dir t("cq-memcap");
  put(t.path / "memory" / "memory.limit_in_bytes", "9223372036854771712\n");
  auto own = t.path / "memory" / "process_api" / "abc";
  put(own / "memory.limit_in_bytes", "9223372036854771712\n");
  memory_config cfg;
  cfg.cgroup_root = t.path.string();
  auto setup = detect_memcap(cfg, "5:devices:/\n4:memory:/process_api/abc\n0::/\n");
  REQUIRE(setup);
  CHECK(setup->mode == memcap_mode::cgroup_v1);
  CHECK(setup->parent == own);
  put(own / "cq-a4" / "memory.memsw.limit_in_bytes", "9223372036854771712\n");
  auto g = create_group(*setup, "a4", 4096);
  REQUIRE(g);
  CHECK(read_text(g->dir / "memory.limit_in_bytes") == "4096");
  CHECK(read_text(g->dir / "memory.memsw.limit_in_bytes") == "4096");
  put(g->dir / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  CHECK(oom_kills(*g) == 2u);
  put(g->dir / "memory.max_usage_in_bytes", "4096\n");
  CHECK(peak_usage(*g) == 4096u);
}

#endif

TEST_CASE("OOM counter parsing") {
  CHECK(parse_oom_kill("oom_kill_disable 0\nunder_oom 1\n", true) == 1u);
  CHECK(parse_oom_kill("oom_kill_disable 0\nunder_oom 1\n", false) == std::nullopt);
  CHECK(parse_oom_kill("oom 3\noom_kill 2\noom_group_kill 1", false) == 2u);
}

#if defined(__linux__) // procfs.cpp: the linux platform's /proc reader
TEST_CASE("/proc/<pid>/stat parsing, own process", "[linux]") {
  proc_entry e;
  REQUIRE(parse_stat_line(
      "42 (a (b) c) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 777 1000 25 0 0", e));
  CHECK(e.pid == 42);
  CHECK(e.ppid == 1);
  CHECK(e.pgrp == 42);
  CHECK(e.state == 'S');
  CHECK(e.start_ticks == 777);
  CHECK(e.rss_pages == 25);
  auto self = read_process(::getpid());
  REQUIRE(self);
  CHECK(self->pid == ::getpid());
  CHECK(self->uid == ::geteuid());
  CHECK(environ_has(::getpid(), "CQ_NO_SUCH_MARKER=1") == marker::absent);
  // /proc shows the environment as it was at exec: a variable set later is not
  // a marker (cleanup finds a job's processes by what they were started with).
  ::setenv("CQ_MEMCAP_TEST_MARK", "x", 1);
  CHECK(environ_has(::getpid(), "CQ_MEMCAP_TEST_MARK=x") == marker::absent);
  CHECK(!signal_same_process(::getpid(), self->start_ticks + 1, 0)); // wrong start: not sent
  CHECK(signal_same_process(::getpid(), self->start_ticks, 0));
}
#endif

TEST_CASE("/proc/<pid>/stat: a process between two programs has no environment area") {
  // Fields 3 (state), 9 (flags), 50 (env_start) and 51 (env_end) of 52.
  auto stat = [](char state, std::uint64_t flags, std::uint64_t env_start, std::uint64_t env_end) {
    std::string s = fmt::format("77 (sh) {} 1 77 77 0 -1 {}", state, flags);
    for (int field = 10; field <= 49; ++field)
      s += " 1";
    return s + fmt::format(" {} {} 0\n", env_start, env_end);
  };
  CHECK(stat_env_area(stat('R', 4194304, 0, 0)) == env_area::none);      // in execve (or leaving)
  CHECK(stat_env_area(stat('S', 4194304, 140, 140)) == env_area::empty); // env -i
  // An environment there: the empty read opened the memory an exec replaced.
  CHECK(stat_env_area(stat('S', 4194304, 140, 900)) == env_area::some);
  CHECK(stat_env_area(stat('S', 0x00200040, 0, 0)) == env_area::unknown); // a kernel thread
  CHECK(stat_env_area(stat('Z', 4194304, 0, 0)) == env_area::unknown);    // ended
  // A kernel without the fields (before 3.5) never says.
  CHECK(stat_env_area("77 (sh) R 1 77 77 0 -1 4194304 1 0 0 0 0 0") == env_area::unknown);
  CHECK(stat_env_area("") == env_area::unknown);
}

TEST_CASE("holds persist and release only by exact id") {
  temp_dir t("cq-memcap");
  auto file = t.path / "holds.json";
  std::string id;
  {
    hold_store h(file);
    CHECK(h.all().empty());
    id = h.add("", "alloc1", "pid 5 survived", 1000);
    CHECK(id.size() == 32);
    CHECK(h.add("gpu1", "alloc2", "x", 1001) != id);
  }
  hold_store h(file);
  REQUIRE(h.all().size() == 2);
  CHECK(!h.release("deadbeef"));
  CHECK(h.release(id));
  CHECK(!h.release(id));
  hold_store again(file);
  REQUIRE(again.all().size() == 1);
  CHECK(again.all()[0].lane == "gpu1");
}

TEST_CASE("a hold keeps its allocation's cgroup until released, and leftovers persist") {
  temp_dir t("cq-memcap");
  auto file = t.path / "holds.json";
  std::string a, b;
  {
    hold_store h(file);
    a = h.add("gpu0", "alloc1", "cgroup busy", 1000, "/sys/fs/cgroup/memory/x/cq-alloc1");
    b = h.add("gpu1", "alloc1", "cgroup busy", 1000, "/sys/fs/cgroup/memory/x/cq-alloc1");
  }
  hold_store h(file);
  std::string group;
  REQUIRE(h.release(a, &group));
  CHECK(group.empty()); // the other lane's hold still owns it
  REQUIRE(h.release(b, &group));
  CHECK(group == "/sys/fs/cgroup/memory/x/cq-alloc1");
  h.add_leftover(group);
  hold_store again(file);
  REQUIRE(again.leftover_cgroups() == std::vector<std::string>{group});
  again.remove_leftover(group);
  CHECK(hold_store(file).leftover_cgroups().empty());
}
