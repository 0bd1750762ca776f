// cq-shim born in its cgroup v2 group (node/adapters/linux/spawn_into_cgroup,
// docs/adr/0050). Hidden from the whole run ("[.cgroup2]"): ctest runs it as
// unit.spawn_into_cgroup, which reports a skip (77) where there is no cgroup2
// hierarchy this process may write (not root, or none mounted) or the build
// has no clone3 path. A cgroup2 mount without controllers (the "unified" one
// of a hybrid setup) serves: membership is what is checked.
#if defined(__linux__)
#include "node/adapters/launcher.hpp"
#include "node/adapters/linux/spawn_into_cgroup.hpp"
#include "node/adapters/posix/primitives.hpp"

#include "daemon_leftovers.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace cq::node;
namespace fs = std::filesystem;

namespace {

/// A cgroup2 mount point, or "".
std::string cgroup2_mount() {
  std::ifstream in("/proc/self/mounts");
  std::string dev, dir, type, rest;
  while (in >> dev >> dir >> type && std::getline(in, rest))
    if (type == "cgroup2")
      return dir;
  return {};
}

/// Waits (30 s at most) for child `pid` to end; its wait status, or -1.
int reap(pid_t pid) {
  int st = -1;
  for (int i = 0; i < 3000; ++i) {
    if (::waitpid(pid, &st, WNOHANG) == pid)
      return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

/// A group of its own under the cgroup2 mount, removed at the end.
struct test_group {
  fs::path dir;
  int fd = -1;
  test_group() {
    auto root = cgroup2_mount();
    if (root.empty())
      return;
    dir = fs::path(root) / ("cq-test-clone-" + std::to_string(::getpid()));
    if (::mkdir(dir.c_str(), 0755) != 0) {
      dir.clear();
      return;
    }
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  ~test_group() { remove(); }
  void remove() {
    if (fd >= 0)
      ::close(fd);
    fd = -1;
    if (!dir.empty())
      ::rmdir(dir.c_str());
    dir.clear();
  }
};

/// Ends the process with ctest's skip code, the group removed first.
[[noreturn]] void skip(test_group& g) {
  g.remove();
  std::exit(77);
}

} // namespace

TEST_CASE("cq-shim is born in its cgroup v2 group and keeps the launch contract", "[.cgroup2]") {
  test_group g;
  if (g.fd < 0) {
    WARN("skipped: no cgroup2 hierarchy this process can write");
    skip(g);
  }
  cq::test::temp_dir tmp("cq-clone");
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(null_fd >= 0);
  {
    int out = ::open((tmp.path / "probe").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(out >= 0);
    auto probe = spawn_into_cgroup("/bin/true", {}, {}, null_fd, out, "/", g.fd);
    ::close(out);
    if (probe.unsupported) {
      ::close(null_fd);
      WARN("skipped: clone3 with CLONE_INTO_CGROUP is not available here (errno " << probe.error
                                                                                  << ")");
      skip(g);
    }
    REQUIRE(probe.pid > 0);
    int st = reap(probe.pid);
    CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  }
  ::close(null_fd);

  auto shim = fs::path(platform::self_exe()).parent_path() / "cq-shim";
  REQUIRE(fs::exists(shim));
  // What the daemon has that a workload must not inherit.
  cq::test::daemon_leftovers leftovers;
  REQUIRE(leftovers.leak >= 0);

  launch_request r;
  r.argv = {"/bin/sh", "-c",
            "echo pgrp $(cut -d' ' -f5 /proc/$$/stat); grep '^0::' /proc/$$/cgroup; echo fds; "
            "ls /proc/$$/fd; pwd; exec grep -E '^Sig(Blk|Ign)' /proc/self/status"};
  r.cwd = tmp.path.string();
  r.env = {{"PATH", "/usr/bin:/bin"}};
  r.log_path = tmp.path / "log";
  r.shim = shim.string();
  r.status_path = tmp.path / "status";
  r.cgroup_dir_fd = g.fd; // and no procs file: only the clone can put it there
  r.pidfd = false;
  auto child = launch(r);
  leftovers.restore();
  REQUIRE(child);
  int st = reap(child->pid);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  auto log = cq::test::read_text(r.log_path);
  INFO(log);
  auto group = "/" + g.dir.filename().string();
  CHECK(log.find("0::" + group + "\n") != std::string::npos);
  CHECK(log.find("pgrp " + std::to_string(child->pid) + "\n") != std::string::npos);
  CHECK(log.find("SigBlk:\t0000000000000000\n") != std::string::npos);
  CHECK(log.find("SigIgn:\t0000000000000000\n") != std::string::npos);
  CHECK(log.find("fds\n0\n1\n2\n" + tmp.path.string() + "\n") != std::string::npos);
  CHECK(cq::test::read_text(r.status_path).rfind("exited 0 ", 0) == 0);

  // A program that cannot be exec'ed: the error, and no child left.
  null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto missing = spawn_into_cgroup((tmp.path / "no-such-program").string(), {}, {}, null_fd,
                                   null_fd, "/", g.fd);
  ::close(null_fd);
  CHECK(missing.pid == -1);
  CHECK_FALSE(missing.unsupported);
  CHECK(missing.error == ENOENT);
  CHECK(::waitpid(-1, nullptr, WNOHANG) <= 0); // nothing left to reap

  // A daemon started with 0 closed gets its log or /dev/null as 0, close-on-
  // exec: the child still has stdin, stdout and stderr, each the right one.
  int saved = ::dup(0);
  REQUIRE(saved >= 0);
  int low_fd = ::open((tmp.path / "low").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  REQUIRE(low_fd >= 0);
  REQUIRE(::dup3(low_fd, 0, O_CLOEXEC) == 0); // the log is 0
  ::close(low_fd);
  null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto low = spawn_into_cgroup("/bin/sh", {"-c", "ls /proc/$$/fd; read x || echo eof"}, {}, null_fd,
                               0, "/", g.fd);
  ::close(null_fd);
  REQUIRE(::dup2(saved, 0) == 0);
  ::close(saved);
  REQUIRE(low.pid > 0);
  st = reap(low.pid);
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  CHECK(cq::test::read_text(tmp.path / "low") == "0\n1\n2\neof\n");
}
#endif
