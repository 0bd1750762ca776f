// Unit tests of the node's GPU side: nvidia-smi parsing and detection (with the
// fake nvidia-smi of tests/fixtures), registered lanes, CUDA_VISIBLE_DEVICES, VRAM attribution, GPU
// lock paths, Xid parsing and classification, the kernel log follower and the fault latch.
#include "cq/node/fault_latch.hpp"
#include "cq/node/gpu.hpp"
#include "node/adapters/gpu_host.hpp"
#include "node/adapters/gpu_lock.hpp"
#include "node/policy/cuda.hpp"

#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <thread>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace cq;
using namespace cq::node;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path dir;
  temp_dir() {
    char tmpl[] = "/tmp/cq-gpu-test-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~temp_dir() { fs::remove_all(dir); }
};

void write(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::trunc) << text;
}

void append(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::app) << text;
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string fake_smi = std::string(CQ_TEST_FIXTURES) + "/fake-nvidia-smi";

constexpr std::uint64_t mib = 1024 * 1024;

const char* two_gpus = "0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA A100-SXM4-40GB, "
                       "40960, 1024\n"
                       "1, GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, NVIDIA A100-SXM4-40GB, "
                       "40960, 0\n";

} // namespace

// ---- nvidia-smi parsing ------------------------------------------------------------

TEST_CASE("two GPUs parse into lanes gpu0 and gpu1 with UUID and memory") {
  auto d = parse_gpu_query(two_gpus);
  REQUIRE(d.size() == 2);
  CHECK(d[0].index == 0);
  CHECK(d[0].uuid == "GPU-11111111-2222-3333-4444-555555555555");
  CHECK(d[0].name == "NVIDIA A100-SXM4-40GB");
  CHECK(d[0].total_bytes == 40960 * mib);
  CHECK(d[0].used_bytes == 1024 * mib);
  auto lanes = lanes_from_devices(d);
  REQUIRE(lanes.size() == 2);
  CHECK(lanes[1].name == "gpu1");
  CHECK(lanes[1].index == 1);
  CHECK(lanes[1].uuid == "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
  CHECK(lanes[1].vram_total_bytes == 40960 * mib);
}

TEST_CASE("devices come back ordered by index, duplicates dropped, N/A memory is 0") {
  auto d = parse_gpu_query("1, GPU-b, Tesla T4, 15360, [N/A]\n"
                           "0, GPU-a, Tesla T4, 15360, 3\n"
                           "1, GPU-c, Tesla T4, 15360, 3\n");
  REQUIRE(d.size() == 2);
  CHECK(d[0].uuid == "GPU-a");
  CHECK(d[1].uuid == "GPU-b");
  CHECK(d[1].used_bytes == 0);
}

TEST_CASE("MIG-enabled output: MIG lines and -L style lines are ignored") {
  const char* mig =
      "\n"
      "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n"
      "  MIG 1g.5gb      Device  0: (UUID: MIG-aaaaaaaa-1111-2222-3333-444444444444)\n"
      "  MIG 1g.5gb      Device  1: (UUID: MIG-bbbbbbbb-1111-2222-3333-444444444444)\n"
      "0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA A100-SXM4-40GB, 40960, 0\n"
      "0, MIG-aaaaaaaa-1111-2222-3333-444444444444, MIG 1g.5gb, 4864, 0\n"
      "\n";
  auto d = parse_gpu_query(mig);
  REQUIRE(d.size() == 1);
  CHECK(d[0].uuid == "GPU-11111111-2222-3333-4444-555555555555");
}

TEST_CASE("no devices and garbage give no lanes") {
  CHECK(parse_gpu_query("").empty());
  CHECK(parse_gpu_query("No devices were found\n").empty());
  CHECK(parse_gpu_query("\x01\x02 garbage, , ,\n,,,,\nx, GPU-a, n, 1, 1\n-1, GPU-a, n, 1, 1\n"
                        "0, notauuid, n, 1, 1\n0, GPU-a, n, lots, 1\n")
            .empty());
}

TEST_CASE("compute-apps lines parse; bad lines are skipped") {
  auto a = parse_apps_query("1234, GPU-a, 500\n"
                            "\n"
                            "abc, GPU-a, 1\n"
                            "77, GPU-b, [N/A]\n"
                            "No running processes found\n");
  REQUIRE(a.size() == 2);
  CHECK(a[0].pid == 1234);
  CHECK(a[0].uuid == "GPU-a");
  CHECK(a[0].used_bytes == 500 * mib);
  CHECK(a[1].pid == 77);
  CHECK(a[1].used_bytes == 0);
}

// ---- running the binary ----------------------------------------------------------------

TEST_CASE("detection through the fake nvidia-smi: two GPUs, no devices, a failing binary") {
  temp_dir t;
  ::setenv("FAKE_NVIDIA_SMI_DIR", t.dir.c_str(), 1);
  write(t.dir / "gpus.csv", two_gpus);
  auto lanes = detect_lanes(fake_smi, std::chrono::seconds(10));
  REQUIRE(lanes);
  REQUIRE(lanes->size() == 2);
  CHECK((*lanes)[0].name == "gpu0");
  CHECK((*lanes)[1].name == "gpu1");
  CHECK(slurp(t.dir / "calls.log")
            .find("--query-gpu=index,uuid,name,memory.total,memory.used "
                  "--format=csv,noheader,nounits") != std::string::npos);

  write(t.dir / "gpus.csv", "No devices were found\n");
  auto none = detect_lanes(fake_smi, std::chrono::seconds(10));
  REQUIRE(!none);
  CHECK(none.error().message.find("no usable GPU") != std::string::npos);

  write(t.dir / "gpus.csv", two_gpus);
  write(t.dir / "exit_code", "9\n");
  auto failed = detect_lanes(fake_smi, std::chrono::seconds(10));
  REQUIRE(!failed);
  CHECK(failed.error().message.find("exited 9") != std::string::npos);
  CHECK(failed.error().message.find("couldn't communicate") != std::string::npos);
  ::unsetenv("FAKE_NVIDIA_SMI_DIR");

  auto missing = detect_lanes("/nonexistent/nvidia-smi", std::chrono::seconds(10));
  REQUIRE(!missing);
  CHECK(missing.error().message.find("not found") != std::string::npos);
}

TEST_CASE("a script exiting 9 and a hanging one") {
  temp_dir t;
  auto script = t.dir / "smi";
  write(script, "#!/bin/sh\necho broken\nexit 9\n");
  fs::permissions(script, fs::perms::owner_all);
  auto r = run_command({script.string()}, std::chrono::seconds(10));
  REQUIRE(r);
  CHECK(r->exit_code == 9);
  CHECK(r->output == "broken\n");
  CHECK(!r->timed_out);

  write(script, "#!/bin/sh\nsleep 30\n");
  auto t0 = std::chrono::steady_clock::now();
  auto h = run_command({script.string()}, std::chrono::milliseconds(300));
  REQUIRE(h);
  CHECK(h->timed_out);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

// ---- attribution -------------------------------------------------------------------------

TEST_CASE("stat and environ parsing for attribution") {
  auto f = parse_stat_ppid_pgrp("1234 (a (weird) name) S 77 1200 1200 0 -1 4194560 ...");
  REQUIRE(f);
  CHECK(f->ppid == 77);
  CHECK(f->pgrp == 1200);
  CHECK(!parse_stat_ppid_pgrp("garbage"));
  std::string env("PATH=/bin\0CQ_ALLOCATION_ID=a-1\0X=y", 33);
  CHECK(environ_allocation_id(env) == "a-1");
  CHECK(!environ_allocation_id(std::string("PATH=/bin\0X=CQ_ALLOCATION_ID=z", 30)));
}

TEST_CASE("owner_of finds this process by its process group", "[linux]") {
  pid_t me = ::getpid();
  std::vector<gpu_owner> owners{{"mine", ::getpgrp()}};
  CHECK(owner_of(me, owners) == "mine");
  CHECK(!owner_of(me, {{"other", 999999}}));
}

TEST_CASE("VRAM is attributed per allocation and lane; the rest is outside; caps per lane") {
  auto lanes = lanes_from_devices(parse_gpu_query(two_gpus));
  auto apps = parse_apps_query("100, GPU-11111111-2222-3333-4444-555555555555, 300\n"
                               "101, GPU-11111111-2222-3333-4444-555555555555, 300\n"
                               "102, GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 100\n"
                               "200, GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 50\n"
                               "300, MIG-unknown, 50\n");
  auto s = attribute_apps(apps, lanes, [](pid_t pid) -> std::optional<std::string> {
    if (pid < 200)
      return std::string("a1");
    return std::nullopt;
  });
  REQUIRE(s.by_allocation.count("a1") == 1);
  auto& use = s.by_allocation["a1"];
  CHECK(use.per_lane["gpu0"] == 600 * mib);
  CHECK(use.per_lane["gpu1"] == 100 * mib);
  CHECK(use.total() == 700 * mib);
  CHECK(use.max_lane() == 600 * mib);
  REQUIRE(s.outside.size() == 1);
  CHECK(s.outside[0].pid == 200);
  CHECK(s.outside[0].lane == "gpu1");
  CHECK(s.outside_per_lane["gpu1"] == 50 * mib);
  CHECK(!over_vram_cap(use, 600 * mib));
  auto over = over_vram_cap(use, 500 * mib);
  REQUIRE(over);
  CHECK(over->first == "gpu0");
}

// ---- configuration ----------------------------------------------------------------------

TEST_CASE("[gpu] of node.toml") {
  temp_dir t;
  auto file = t.dir / "node.toml";
  auto none = load_gpu_config(file);
  REQUIRE(none);
  CHECK(none->nvidia_smi == "nvidia-smi");
  CHECK(none->kernel_log == "/dev/kmsg");
  CHECK(none->lock_paths.empty());
  write(file, "endpoint = \"x\"\n[gpu]\nnvidia_smi = \"/opt/smi\"\nlock_paths = [\"/tmp/a.lock\", "
              "\"/tmp/b.lock\"]\nkernel_log = \"\"\n");
  auto c = load_gpu_config(file);
  REQUIRE(c);
  CHECK(c->nvidia_smi == "/opt/smi");
  CHECK(c->lock_paths == std::vector<std::string>{"/tmp/a.lock", "/tmp/b.lock"});
  CHECK(c->kernel_log.empty());
  write(file, "[gpu]\nnvidia-smi = \"x\"\n");
  auto typo = load_gpu_config(file);
  REQUIRE(!typo);
  CHECK(typo.error().message.find("unknown key 'gpu.nvidia-smi'") != std::string::npos);
  write(file, "[gpu]\nlock_paths = [\"relative.lock\"]\n");
  CHECK(!load_gpu_config(file));
}

/// load_gpu_config of a node.toml holding `text`: the error message, or "" if it loaded.
std::string gpu_config_error(const std::string& text) {
  temp_dir t;
  auto file = t.dir / "node.toml";
  write(file, text);
  auto c = load_gpu_config(file);
  return c ? std::string() : c.error().message;
}

TEST_CASE("[[gpu.lanes]] registers lanes with name, optional index and uuid, and total VRAM") {
  temp_dir t;
  auto file = t.dir / "node.toml";
  write(file, "name = \"n1\"\n"
              "[gpu]\n"
              "kernel_log = \"\"\n"
              "[[gpu.lanes]]\n"
              "name = \"accel\"\n"
              "index = 5\n"
              "uuid = \"GPU-55555555-0000-0000-0000-000000000000\"\n"
              "vram_bytes = 25769803776\n"
              "[[gpu.lanes]]\n"
              "name = \"npu.0_a-b\"\n"
              "vram_bytes = 0\n");
  auto c = load_gpu_config(file);
  REQUIRE(c);
  CHECK(c->kernel_log.empty());
  REQUIRE(c->lanes.size() == 2);
  CHECK(c->lanes[0].name == "accel");
  CHECK(c->lanes[0].index == 5);
  CHECK(c->lanes[0].uuid == "GPU-55555555-0000-0000-0000-000000000000");
  CHECK(c->lanes[0].vram_total_bytes == 25769803776ULL);
  CHECK(c->lanes[0].vram_used_bytes == 0);
  CHECK(c->lanes[1].name == "npu.0_a-b");
  CHECK(!c->lanes[1].index);
  CHECK(c->lanes[1].uuid.empty());
  CHECK(c->lanes[1].vram_total_bytes == 0);

  write(file, "[gpu]\nnvidia_smi = \"/opt/smi\"\n");
  auto detected = load_gpu_config(file);
  REQUIRE(detected);
  CHECK(detected->lanes.empty()); // no [[gpu.lanes]]: lanes are detected
}

TEST_CASE("[[gpu.lanes]] refuses duplicate names, indexes and uuids, naming file, line and key") {
  auto dup_name = gpu_config_error("[[gpu.lanes]]\nname = \"a\"\nvram_bytes = 1\n"
                                   "[[gpu.lanes]]\nname = \"a\"\nvram_bytes = 1\n");
  CHECK(dup_name.find("node.toml:5: 'gpu.lanes.name' \"a\" is already the name of the lane "
                      "registered on line 1") != std::string::npos);
  auto dup_index = gpu_config_error("[[gpu.lanes]]\nname = \"a\"\nindex = 2\nvram_bytes = 1\n"
                                    "[[gpu.lanes]]\nname = \"b\"\nindex = 2\nvram_bytes = 1\n");
  CHECK(dup_index.find("node.toml:7: 'gpu.lanes.index' 2 is already the index of lane 'a'") !=
        std::string::npos);
  auto dup_uuid =
      gpu_config_error("[[gpu.lanes]]\nname = \"a\"\nuuid = \"GPU-x\"\nvram_bytes = 1\n"
                       "[[gpu.lanes]]\nname = \"b\"\nuuid = \"GPU-x\"\nvram_bytes = 1\n");
  CHECK(dup_uuid.find("node.toml:7: 'gpu.lanes.uuid'") != std::string::npos);
}

TEST_CASE(
    "[[gpu.lanes]] refuses bad names, a negative index, a missing VRAM size and unknown keys") {
  const std::vector<std::string> bad_names = {
      "\"\"",    "\"has space\"",
      "\"a/b\"", "\"gpü\"",
      "7",       fmt::format("\"{}\"", std::string(65, 'x'))};
  for (auto& name : bad_names) {
    auto e = gpu_config_error(fmt::format("[[gpu.lanes]]\nname = {}\nvram_bytes = 1\n", name));
    CAPTURE(name);
    CHECK(e.find("node.toml:2: 'gpu.lanes.name' must be 1 to 64 characters") != std::string::npos);
  }
  CHECK(gpu_config_error(
            fmt::format("[[gpu.lanes]]\nname = \"{}\"\nvram_bytes = 1\n", std::string(64, 'x')))
            .empty());
  CHECK(gpu_config_error("[[gpu.lanes]]\nname = \"a\"\nindex = -1\nvram_bytes = 1\n")
            .find("node.toml:3: 'gpu.lanes.index' must be an integer >= 0") != std::string::npos);
  CHECK(gpu_config_error("[[gpu.lanes]]\nname = \"a\"\nindex = \"0\"\nvram_bytes = 1\n")
            .find("node.toml:3: 'gpu.lanes.index' must be an integer") != std::string::npos);
  CHECK(gpu_config_error("[gpu]\n\n[[gpu.lanes]]\nname = \"a\"\nindex = 0\n")
            .find("node.toml:3: 'gpu.lanes.vram_bytes' is missing for lane 'a'") !=
        std::string::npos);
  CHECK(gpu_config_error("[[gpu.lanes]]\nname = \"a\"\nvram_bytes = -5\n")
            .find("node.toml:3: 'gpu.lanes.vram_bytes' must be an integer >= 0") !=
        std::string::npos);
  CHECK(gpu_config_error("[[gpu.lanes]]\nindex = 0\nvram_bytes = 1\n")
            .find("node.toml:1: 'gpu.lanes.name' is missing") != std::string::npos);
  CHECK(gpu_config_error("[[gpu.lanes]]\nname = \"a\"\nvram = 1\nvram_bytes = 1\n")
            .find("node.toml:3: unknown key 'gpu.lanes.vram' (known: name, index, uuid, "
                  "vram_bytes)") != std::string::npos);
  CHECK(gpu_config_error("[gpu]\nlanes = []\n").find("node.toml:2: 'gpu.lanes' is empty") !=
        std::string::npos);
  CHECK(gpu_config_error("[gpu]\nlanes = \"gpu0\"\n")
            .find("node.toml:2: 'gpu.lanes' must be an array of tables") != std::string::npos);
}

// ---- lock paths -----------------------------------------------------------------------------

TEST_CASE("the first lock path is held once for all GPU allocations, refcounted") {
  temp_dir t;
  auto first = (t.dir / "cq-gpu.lock").string();
  auto probe = (t.dir / "legacy.lock").string();
  gpu_lock lock({first, probe});
  REQUIRE(lock.acquire(std::chrono::milliseconds(0)));
  REQUIRE(lock.acquire(std::chrono::milliseconds(0))); // a second GPU allocation: no conflict
  CHECK(lock.holders() == 2);
  CHECK(probe_is_busy(first)); // an outside user sees it held
  lock.release();
  CHECK(probe_is_busy(first));
  lock.release();
  CHECK(!lock.held());
  CHECK(!probe_is_busy(first));
  CHECK(!fs::exists(probe)); // probing never creates a probe file
}

TEST_CASE("an outside holder: acquire fails after its wait; a held probe is busy") {
  temp_dir t;
  auto first = (t.dir / "cq-gpu.lock").string();
  auto probe = (t.dir / "legacy.lock").string();
  // Another open file description stands for an outside process (flock is per description).
  int outside = ::open(first.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  REQUIRE(::flock(outside, LOCK_EX) == 0);
  gpu_lock lock({first, probe});
  auto r = lock.acquire(std::chrono::milliseconds(100));
  REQUIRE(!r);
  CHECK(r.error().code == errc::unavailable);
  CHECK(lock.holders() == 0);
  ::close(outside);
  REQUIRE(lock.acquire(std::chrono::milliseconds(100)));
  lock.release();

  CHECK(lock.busy_probes().empty());
  int legacy = ::open(probe.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  REQUIRE(::flock(legacy, LOCK_SH) == 0);
  CHECK(lock.busy_probes() == bus::string_list{probe});
  ::close(legacy);
  CHECK(lock.busy_probes().empty());
}

// ---- Xid parsing and classification
// --------------------------------------------------------------

TEST_CASE("Xid lines parse in their several forms") {
  auto e = parse_xid_line("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.");
  REQUIRE(e);
  CHECK(e->xid == 79);
  CHECK(e->device == "PCI:0000:3b:00");
  CHECK(e->line == "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.");
  auto dmesg = parse_xid_line("[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable "
                              "double bit error (DBE) has been detected on GPU in the framebuffer");
  REQUIRE(dmesg);
  CHECK(dmesg->xid == 48);
  auto old = parse_xid_line("NVRM: Xid (0000:03:00): 13, 0003 00000000 0000a1c0 00001b0c");
  REQUIRE(old);
  CHECK(old->xid == 13);
  CHECK(old->device == "0000:03:00");
  auto kmsg = parse_xid_line(std::string(kmsg_record_text(
      "3,1234,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 94, pid='<unknown>', name=<unknown>, "
      "Contained: SM (0x1). RST: No, D-RST: No\n SUBSYSTEM=pci\n")));
  REQUIRE(kmsg);
  CHECK(kmsg->xid == 94);
  CHECK(kmsg->line.find("SUBSYSTEM") == std::string::npos);
  CHECK(!parse_xid_line("NVRM: loading NVIDIA UNIX x86_64 Kernel Module"));
  CHECK(!parse_xid_line("NVRM: Xid (PCI:0000:3b:00): abc"));
  CHECK(!parse_xid_line("NVRM: Xid (PCI:0000:3b:00: 79"));
  CHECK(!parse_xid_line("usb 1-1: new high-speed USB device"));
}

TEST_CASE("hardware Xids latch, application Xids do not") {
  for (int x : {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154})
    CHECK(classify_xid(x) == xid_class::hardware);
  for (int x : {13, 31, 32, 43, 45, 68, 69, 109})
    CHECK(classify_xid(x) == xid_class::application);
  CHECK(classify_xid(1) == xid_class::unknown);
  CHECK(classify_xid(999) == xid_class::unknown);
}

TEST_CASE("kmsg record text") {
  CHECK(kmsg_record_text("6,1,2,-;hello\n") == "hello");
  CHECK(kmsg_record_text("6,1,2,-;a;b\n SUBSYSTEM=x\n") == "a;b");
  CHECK(kmsg_record_text("plain line") == "plain line");
}

// ---- kernel log follower
// -----------------------------------------------------------------------------

TEST_CASE("a regular-file kernel log is followed from its end, line by line") {
  temp_dir t;
  auto log = t.dir / "kmsg";
  write(log, "old line before start\nNVRM: Xid (PCI:0000:01:00): 79, old\n");
  kernel_log_follower f(log);
  REQUIRE(f.open());
  CHECK(f.read_lines().empty());
  append(log, "first\nsecond part");
  auto l1 = f.read_lines();
  REQUIRE(l1.size() == 1);
  CHECK(l1[0] == "first");
  append(log, " done\n");
  auto l2 = f.read_lines();
  REQUIRE(l2.size() == 1);
  CHECK(l2[0] == "second part done");
  write(log, "after truncation\n");
  auto l3 = f.read_lines();
  REQUIRE(l3.size() == 1);
  CHECK(l3[0] == "after truncation");
  kernel_log_follower missing(t.dir / "nope");
  CHECK(!missing.open());
}

// ---- fault latch
// ---------------------------------------------------------------------------------------

TEST_CASE("a fault latches once, survives a reload and is archived on clear") {
  temp_dir t;
  fault_latch latch(t.dir);
  REQUIRE(latch.load(1));
  CHECK(!latch.latched());
  CHECK(latch.clear("nothing", "owner", 5).error().code == errc::not_found);
  auto e = parse_xid_line("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.");
  std::optional<std::string> err;
  CHECK(latch.latch(*e, 1000, &err));
  CHECK(!err);
  auto e2 = parse_xid_line("NVRM: Xid (PCI:0000:5e:00): 48, DBE");
  CHECK(!latch.latch(*e2, 2000, &err)); // the first fault stays
  CHECK(latch.current()->xid == 79);

  fault_latch again(t.dir); // a restart
  REQUIRE(again.load(3000));
  REQUIRE(again.latched());
  CHECK(again.current()->xid == 79);
  CHECK(again.current()->device == "PCI:0000:3b:00");
  CHECK(again.current()->at_ms == 1000);
  CHECK(again.current()->message.find("fallen off the bus") != std::string::npos);

  auto archive = again.clear("reseated the card", "owner-id", 4000);
  REQUIRE(archive);
  CHECK(archive->filename() == "KERNEL-FAULT.4000.json");
  CHECK(!again.latched());
  CHECK(!fs::exists(t.dir / "KERNEL-FAULT.json"));
  auto text = slurp(*archive);
  CHECK(text.find("reseated the card") != std::string::npos);
  CHECK(text.find("owner-id") != std::string::npos);
  CHECK(text.find("\"xid\": 79") != std::string::npos);

  fault_latch third(t.dir);
  REQUIRE(third.load(5000));
  CHECK(!third.latched());
}

TEST_CASE("an interrupted clear is finished at load; a corrupt record still latches") {
  temp_dir t;
  write(
      t.dir / "KERNEL-FAULT.json",
      R"({"xid": 79, "device": "d", "message": "m", "at_ms": 1, "cleared": {"reason": "r", "by": "o", "at_ms": 77}})");
  fault_latch latch(t.dir);
  REQUIRE(latch.load(100));
  CHECK(!latch.latched());
  CHECK(fs::exists(t.dir / "KERNEL-FAULT.77.json"));

  write(t.dir / "KERNEL-FAULT.json", "{not json");
  fault_latch corrupt(t.dir);
  CHECK(!corrupt.load(100));
  CHECK(corrupt.latched());
}

// ---- supervisor
// ------------------------------------------------------------------------------------------

TEST_CASE("the supervisor refuses GPU launches while latched and asks to stop GPU allocations") {
  temp_dir t;
  ::setenv("FAKE_NVIDIA_SMI_DIR", t.dir.c_str(), 1);
  write(t.dir / "gpus.csv", two_gpus);
  auto klog = t.dir / "kern.log";
  write(klog, "");
  gpu_config cfg;
  cfg.nvidia_smi = fake_smi;
  cfg.kernel_log = klog.string();
  cfg.lock_paths = {(t.dir / "cq-gpu.lock").string(), (t.dir / "legacy.lock").string()};
  gpu_supervisor gpu(cfg, t.dir);
  gpu.start(0);
  REQUIRE(gpu.lanes().size() == 2);
  REQUIRE(gpu.before_launch("a1", {"gpu0"}, 100 * mib, std::chrono::milliseconds(0)));
  gpu.launched("a1", ::getpgrp());
  CHECK(probe_is_busy(cfg.lock_paths[0]));

  // This test process is a1's group: 150 MiB on gpu0 is over its 100 MiB cap.
  write(t.dir / "apps.csv", fmt::format("{}, GPU-11111111-2222-3333-4444-555555555555, 150\n1, "
                                        "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 10\n",
                                        ::getpid()));
  // Telemetry comes from the sampler thread: tick until its first answer
  // arrives (a deadline, not a sleep-and-hope).
  std::vector<gpu_supervisor::stop_request> stops;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (std::int64_t now = 1000; stops.empty() && std::chrono::steady_clock::now() < deadline;
       now += 100) {
    stops = gpu.tick(now, 100);
    if (stops.empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].reason == "vram_cap");
  CHECK(gpu.tick(20000, 1000).empty()); // asked once
  bus::heartbeat_req hb;
  gpu.fill_heartbeat(hb);
  REQUIRE(hb.lanes);
  CHECK(hb.lanes->at(1).vram_outside_bytes == 10 * mib);
  REQUIRE(hb.outside_gpu_processes);
  CHECK(hb.outside_gpu_processes->at(0).pid == 1);
  REQUIRE(hb.usage);
  CHECK(hb.usage->at(0).vram_bytes == 150 * mib);
  CHECK(hb.busy_probes == bus::string_list{});
  auto fin = gpu.finish("a1");
  REQUIRE(fin);
  CHECK(fin->stop_reason == "vram_cap");
  CHECK(fin->peak_vram_bytes == 150 * mib);
  CHECK(!probe_is_busy(cfg.lock_paths[0]));

  REQUIRE(gpu.before_launch("a2", {"gpu1"}, std::nullopt, std::chrono::milliseconds(0)));
  gpu.launched("a2", 999999);
  append(klog, "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n");
  CHECK(gpu.tick(3000, 100000).empty());
  CHECK(!gpu.fault_latched());
  append(klog, "[ 99.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n");
  stops = gpu.tick(4000, 100000);
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].allocation == "a2");
  CHECK(stops[0].reason == "fault");
  CHECK(gpu.fault_latched());
  auto refused = gpu.before_launch("a3", {"gpu0"}, std::nullopt, std::chrono::milliseconds(0));
  REQUIRE(!refused);
  CHECK(refused.error().message.find("fault") != std::string::npos);
  CHECK(gpu.finish("a2")->stop_reason == "fault");
  CHECK(!gpu.finish("a3"));

  gpu_supervisor restarted(cfg, t.dir);
  restarted.start(0);
  CHECK(restarted.fault_latched());
  REQUIRE(restarted.clear_fault("replaced", "owner", 5000));
  CHECK(!restarted.fault_latched());
  CHECK(restarted.clear_fault("again", "owner", 6000).error().code == errc::not_found);

  int legacy = ::open(cfg.lock_paths[1].c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  REQUIRE(::flock(legacy, LOCK_EX) == 0);
  auto busy = restarted.before_launch("a4", {"gpu0"}, std::nullopt, std::chrono::milliseconds(0));
  REQUIRE(!busy);
  CHECK(busy.error().message.find("legacy.lock") != std::string::npos);
  ::close(legacy);
  ::unsetenv("FAKE_NVIDIA_SMI_DIR");
}

namespace {

/// Ticks `gpu` (sampling every 100 ms of its clock) until `done` holds for its
/// heartbeat or 10 s of real time pass: telemetry comes from the sampler
/// thread, so this waits on its answer with a deadline.
template <class Done>
bus::heartbeat_req tick_until(gpu_supervisor& gpu, Done&& done) {
  bus::heartbeat_req hb;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (std::int64_t now = 1000; std::chrono::steady_clock::now() < deadline; now += 100) {
    gpu.tick(now, 100);
    hb = {};
    gpu.fill_heartbeat(hb);
    if (done(hb))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return hb;
}

} // namespace

TEST_CASE("the supervisor uses registered lanes and does not need nvidia-smi to have them") {
  temp_dir t;
  gpu_config cfg;
  cfg.nvidia_smi = (t.dir / "no-such-nvidia-smi").string();
  cfg.kernel_log = "";
  auto file = t.dir / "node.toml";
  write(file, "[[gpu.lanes]]\nname = \"accel\"\nindex = 5\nvram_bytes = 1073741824\n"
              "[[gpu.lanes]]\nname = \"npu\"\nvram_bytes = 0\n");
  auto loaded = load_gpu_config(file);
  REQUIRE(loaded);
  cfg.lanes = loaded->lanes;
  gpu_supervisor gpu(cfg, t.dir);
  gpu.start(0);
  REQUIRE(gpu.lanes().size() == 2);
  CHECK(gpu.lanes()[0].name == "accel");
  CHECK(gpu.lanes()[0].index == 5);
  CHECK(gpu.lanes()[0].vram_total_bytes == 1024 * mib);
  CHECK(gpu.lanes()[1].name == "npu");
  CHECK(!gpu.lanes()[1].index);
  // Telemetry fails (no binary): the lanes stay, with 0 used.
  for (std::int64_t now = 1000; now < 2000; now += 100)
    CHECK(gpu.tick(now, 100).empty());
  bus::heartbeat_req hb;
  gpu.fill_heartbeat(hb);
  REQUIRE(hb.lanes);
  REQUIRE(hb.lanes->size() == 2);
  CHECK(hb.lanes->at(0).name == "accel");
  CHECK(hb.lanes->at(0).vram_used_bytes == 0);
  REQUIRE(gpu.before_launch("a1", {"npu"}, std::nullopt, std::chrono::milliseconds(0)));
  CHECK(gpu.finish("a1"));
}

TEST_CASE("registered lanes take VRAM telemetry from nvidia-smi by uuid, and 0 without an answer") {
  temp_dir t;
  ::setenv("FAKE_NVIDIA_SMI_DIR", t.dir.c_str(), 1);
  write(t.dir / "gpus.csv", two_gpus);
  write(t.dir / "apps.csv", "1, GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 10\n");
  gpu_config cfg;
  cfg.nvidia_smi = fake_smi;
  cfg.kernel_log = "";
  bus::lane_info big;
  big.name = "big";
  big.index = 3;
  big.uuid = "GPU-11111111-2222-3333-4444-555555555555"; // gpu0 of two_gpus: 1024 MiB used
  big.vram_total_bytes = 40960 * mib;
  bus::lane_info spare;
  spare.name = "spare";
  spare.uuid = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"; // gpu1 of two_gpus
  spare.vram_total_bytes = 40960 * mib;
  bus::lane_info odd;
  odd.name = "odd"; // no uuid: nothing of nvidia-smi's answer is its
  odd.vram_total_bytes = 8192 * mib;
  cfg.lanes = {big, spare, odd};
  gpu_supervisor gpu(cfg, t.dir);
  gpu.start(0);
  // Detection did not run: nvidia-smi has not been called at all yet, and the
  // lanes are the registered three, not nvidia-smi's gpu0 and gpu1.
  CHECK(!fs::exists(t.dir / "calls.log"));
  REQUIRE(gpu.lanes().size() == 3);
  CHECK(gpu.lanes()[0].name == "big");

  auto hb = tick_until(gpu, [](const bus::heartbeat_req& hb) {
    return hb.lanes && hb.lanes->at(0).vram_used_bytes != 0;
  });
  REQUIRE(hb.lanes);
  CHECK(hb.lanes->at(0).vram_used_bytes == 1024 * mib);
  CHECK(hb.lanes->at(1).vram_used_bytes == 0);
  CHECK(hb.lanes->at(1).vram_outside_bytes == 10 * mib);
  CHECK(hb.lanes->at(2).vram_used_bytes == 0);
  CHECK(hb.lanes->at(2).vram_outside_bytes == 0);
  REQUIRE(hb.outside_gpu_processes);
  REQUIRE(hb.outside_gpu_processes->size() == 1);
  CHECK(hb.outside_gpu_processes->at(0).lane == "spare");

  // nvidia-smi stops answering: registered lanes report 0, not the last figure.
  write(t.dir / "exit_code", "9\n");
  hb = tick_until(gpu, [](const bus::heartbeat_req& hb) {
    return hb.lanes && hb.lanes->at(0).vram_used_bytes == 0;
  });
  REQUIRE(hb.lanes);
  CHECK(hb.lanes->at(0).vram_used_bytes == 0);
  CHECK(hb.lanes->at(1).vram_outside_bytes == 0);
  REQUIRE(hb.outside_gpu_processes);
  CHECK(hb.outside_gpu_processes->empty());
  ::unsetenv("FAKE_NVIDIA_SMI_DIR");
}

// ---- CUDA_VISIBLE_DEVICES ---------------------------------------------------------------------

namespace {

bus::lane_info lane(std::string name, std::optional<std::int64_t> index) {
  bus::lane_info l;
  l.name = std::move(name);
  l.index = index;
  return l;
}

} // namespace

TEST_CASE("CUDA_VISIBLE_DEVICES comes from the lanes' device indexes, not their names") {
  std::vector<bus::lane_info> node_lanes{lane("gpu0", 2), lane("big", 3), lane("gpu2", 0)};
  auto big = cuda_visible_devices({"big"}, node_lanes);
  REQUIRE(big);
  CHECK(*big == std::optional<std::string>("3"));
  auto renamed = cuda_visible_devices({"gpu2"}, node_lanes);
  REQUIRE(renamed);
  CHECK(*renamed == std::optional<std::string>("0"));
  auto ordered = cuda_visible_devices({"gpu2", "gpu0", "big"}, node_lanes);
  REQUIRE(ordered);
  CHECK(*ordered == std::optional<std::string>("0,2,3")); // the start order's order
}

TEST_CASE("lanes without a device index remove CUDA_VISIBLE_DEVICES") {
  std::vector<bus::lane_info> node_lanes{lane("gpu0", std::nullopt), lane("npu", std::nullopt)};
  auto one = cuda_visible_devices({"gpu0"}, node_lanes);
  REQUIRE(one);
  CHECK(!*one);
  auto two = cuda_visible_devices({"npu", "gpu0"}, node_lanes);
  REQUIRE(two);
  CHECK(!*two);
  auto none = cuda_visible_devices({}, node_lanes);
  REQUIRE(none);
  CHECK(!*none);
}

TEST_CASE("a lane the node does not have, or one given twice, is refused by name") {
  std::vector<bus::lane_info> node_lanes{lane("gpu0", 0), lane("gpu1", 1)};
  auto unknown = cuda_visible_devices({"gpu0", "gpu7"}, node_lanes);
  REQUIRE(!unknown);
  CHECK(unknown.error().code == errc::invalid_argument);
  CHECK(unknown.error().message == "lane 'gpu7' is not a lane of this node");
  auto on_no_lanes = cuda_visible_devices({"gpu0"}, {});
  REQUIRE(!on_no_lanes);
  CHECK(on_no_lanes.error().message.find("'gpu0'") != std::string::npos);
  auto twice = cuda_visible_devices({"gpu1", "gpu0", "gpu1"}, node_lanes);
  REQUIRE(!twice);
  CHECK(twice.error().message == "lane 'gpu1' is given twice");
  auto twice_unindexed = cuda_visible_devices({"npu", "npu"}, {lane("npu", std::nullopt)});
  REQUIRE(!twice_unindexed);
  CHECK(twice_unindexed.error().message == "lane 'npu' is given twice");
  // Two lanes of one device (a config the loader refuses; the mapping refuses it too).
  auto same_device = cuda_visible_devices({"a", "b"}, {lane("a", 4), lane("b", 4)});
  REQUIRE(!same_device);
  CHECK(same_device.error().message == "lanes 'a' and 'b' are both device 4");
}

TEST_CASE("a mix of lanes with and without a device index is refused") {
  std::vector<bus::lane_info> node_lanes{lane("gpu0", 0), lane("npu", std::nullopt)};
  auto mixed = cuda_visible_devices({"npu", "gpu0"}, node_lanes);
  REQUIRE(!mixed);
  CHECK(mixed.error().code == errc::invalid_argument);
  CHECK(mixed.error().message.find("lane 'gpu0' has a device index and lane 'npu' has none") !=
        std::string::npos);
}

TEST_CASE("with telemetry = false nvidia-smi is never run: only registered lanes exist") {
  temp_dir t;
  auto marker = t.dir / "smi-ran";
  auto smi = t.dir / "smi";
  write(smi, "#!/bin/sh\ntouch '" + marker.string() + "'\n");
  fs::permissions(smi, fs::perms::owner_all);
  auto file = t.dir / "node.toml";
  write(file,
        "[gpu]\nkernel_log = \"\"\ntelemetry = false\nnvidia_smi = \"" + smi.string() + "\"\n");
  auto c = load_gpu_config(file);
  REQUIRE(c);
  CHECK_FALSE(c->telemetry);
  {
    gpu_supervisor sup(*c, t.dir);
    sup.start(0);
    for (std::int64_t now = 0; now <= 5000; now += 500)
      CHECK(sup.tick(now, 500).empty());
    CHECK(sup.lanes().empty());
  }
  CHECK_FALSE(fs::exists(marker));
  CHECK(gpu_config_error("[gpu]\ntelemetry = \"no\"\n")
            .find("'gpu.telemetry' must be true or "
                  "false") != std::string::npos);
}
