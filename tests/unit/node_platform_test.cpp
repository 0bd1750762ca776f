// The node's platform layer (node/adapters/platforms.cpp): the posix process
// host over the primitives of posix/primitives.hpp, both process hosts side by side
// on the same workloads, and the macOS environment parser (pure, so tested
// here). Waits have deadlines; nothing asserts how long anything took.
#include "node/adapters/adapters.hpp"
#include "node/adapters/launcher.hpp"
#include "node/adapters/posix/primitives.hpp"
#if defined(__linux__)
#include "node/adapters/linux/procfs.hpp"
#endif
#include "daemon_leftovers.hpp"
#include "scratch_dir.hpp"

#include "cq/node/procscan.hpp"
#include "cq/node/standby_wire.hpp"
#include "cq/node/terminal_frame.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

using namespace cq::node;
namespace fs = std::filesystem;

namespace {

/// The end a watch() handler reported, waited for with a deadline.
struct ending {
  std::mutex m;
  std::condition_variable cv;
  std::optional<child_exit> exit;
  std::optional<child_exit> wait(std::chrono::seconds d = std::chrono::seconds(30)) {
    std::unique_lock lock(m);
    cv.wait_for(lock, d, [&] { return exit.has_value(); });
    return exit;
  }
  std::function<void(child_exit)> handler() {
    return [this](child_exit e) {
      std::lock_guard lock(m);
      exit = e;
      cv.notify_all();
    };
  }
};

/// One test case's folder and marker (its own: ctest runs cases side by side
/// in separate processes, and a scan sees them all); at its end every
/// process that carries the marker is killed, so a failed case leaves none.
struct scratch {
  fs::path dir;
  std::string id; ///< CQ_ALLOCATION_ID of everything this case starts
  scratch() {
    static int n = 0;
    id = "platform-test-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
    dir = fs::temp_directory_path() / ("cq-" + id);
    fs::create_directories(dir);
  }
  ~scratch() {
    for (auto& p : platform::processes())
      if (p.state != 'Z' &&
          platform::environ_has(p.pid, "CQ_ALLOCATION_ID=" + id) == marker::present)
        ::kill(p.pid, SIGKILL);
    fs::remove_all(dir);
  }
};

launch_request request(const scratch& s, const std::string& script) {
  launch_request r;
  r.argv = {"/bin/sh", "-c", script};
  r.cwd = s.dir.string();
  r.env = {{"PATH", "/usr/bin:/bin"}, {"CQ_ALLOCATION_ID", s.id}};
  r.log_path = s.dir / "log";
  return r;
}

/// The processes that carry `s`'s marker, for a failed scan's message.
std::string marked(const scratch& s) {
  std::string out;
  for (auto& p : platform::processes())
    if (platform::environ_has(p.pid, "CQ_ALLOCATION_ID=" + s.id) != marker::absent)
      out += fmt::format("pid {} ppid {} pgrp {} start {} state {}; ", p.pid, p.ppid, p.pgrp,
                         p.start_ticks, p.state);
  return out.empty() ? "none" : out;
}

/// Polls `pred` until it holds or 30 s passed.
template <class F>
bool eventually(F pred) {
  for (int i = 0; i < 3000; ++i) {
    if (pred())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string procargs(int argc, std::initializer_list<std::string_view> parts) {
  std::string s(reinterpret_cast<const char*>(&argc), sizeof argc);
  for (auto p : parts) {
    s += p;
    s += '\0';
  }
  return s;
}

} // namespace

/// The platforms this build has: linux and posix on Linux, posix elsewhere.
std::vector<platform_kind> platforms() {
  std::vector<platform_kind> out{platform_kind::posix};
  if (auto l = parse_platform("linux"))
    out.push_back(*l);
  return out;
}

TEST_CASE("every platform reports a child's exit code, signal and peak memory") {
  scratch s;
  for (auto p : platforms()) {
    INFO("platform " << to_string(p));
    auto host = make_process_host(p);
    auto leader = host->launch(request(s, "exit 7"), {});
    REQUIRE(leader);
    CHECK(leader->start_ticks != 0);
    ending end;
    host->watch(leader->pid, end.handler());
    auto e = end.wait();
    REQUIRE(e);
    CHECK(e->reaped);
    CHECK(e->exit_code == 7);
    CHECK(e->maxrss_bytes > 0);

    auto sleeper = host->launch(request(s, "exec sleep 300"), {});
    REQUIRE(sleeper);
    ending killed;
    host->watch(sleeper->pid, killed.handler());
    host->kill_group(sleeper->pid);
    auto k = killed.wait();
    REQUIRE(k);
    CHECK(k->signal == SIGKILL);
    // Reaped: the pid is not ours any more, and group signals do nothing.
    CHECK(::kill(sleeper->pid, 0) != 0);
    host->kill_group(sleeper->pid);
    host->close();
  }
}

TEST_CASE("posix: an adopted leader (not our child) is watched by its start time") {
  scratch s;
  // A leader another process host started: this one never had it as a child.
  auto first = make_process_host(platform_kind::posix);
  auto leader = first->launch(request(s, "exec sleep 300"), {});
  REQUIRE(leader);
  auto second = make_process_host(platform_kind::posix);
  CHECK_FALSE(second->adopt({leader->pid, leader->start_ticks + 1})); // another start: refused
  REQUIRE(second->adopt(*leader));
  // Polled: while the shell execs sleep its environment reads as empty.
  std::optional<leader_id> found;
  REQUIRE(eventually([&] {
    found = second->find_leader("CQ_ALLOCATION_ID=" + s.id);
    return found.has_value();
  }));
  CHECK(found->pid == leader->pid);
  CHECK(found->start_ticks == leader->start_ticks);
  ending adopted;
  second->watch(leader->pid, adopted.handler());
  ending own;
  first->watch(leader->pid, own.handler());
  second->terminate_group(leader->pid); // checked by start time, then signalled
  auto a = adopted.wait();
  REQUIRE(a);
  CHECK_FALSE(a->reaped); // only the parent (first) learns the status
  auto o = own.wait();
  REQUIRE(o);
  CHECK(o->signal == SIGTERM);
  first->close();
  second->close();
}

TEST_CASE("posix: memory of a group and its escaped children; a cleanup scan finds the marker") {
  scratch s;
  auto host = make_process_host(platform_kind::posix);
  // setsid(1) on Linux; a Mac has none, but has perl.
  auto leader = host->launch(
      request(s, "if command -v setsid >/dev/null; then setsid sleep 301; else perl -MPOSIX -e "
                 "'POSIX::setsid(); exec @ARGV' sleep 301; fi & exec sleep 300"),
      {});
  REQUIRE(leader);
  REQUIRE(eventually([&] {
    auto procs = platform::processes();
    for (auto& p : procs)
      if (p.ppid == leader->pid && p.pgrp != leader->pid)
        return true;
    return false;
  }));
  // The setsid child counts in the tree only. On a busy machine a read
  // right after it appears (it may not have exec'd yet) can count none of
  // its pages: 4 of 40 runs beside two CPU hogs failed such a single read.
  // So it is read again until its pages show.
  std::vector<std::uint64_t> group, tree;
  CHECK(eventually([&] {
    group = host->group_rss({leader->pid});
    tree = host->tree_rss({leader->pid});
    return group.size() == 1 && tree.size() == 1 && group[0] > 0 && tree[0] > group[0];
  }));
  ending end;
  host->watch(leader->pid, end.handler());
  host->kill_group(leader->pid);
  REQUIRE(end.wait());
  // The escaped child carries the marker: the scan kills it; the next is empty.
  scan_request req{s.id, *leader, true, {}};
  auto first = host->cleanup_scan(req);
  INFO("leader " << leader->pid << " start " << leader->start_ticks
                 << "; marked now: " << marked(s));
  CHECK(first.count >= 1);
  CHECK(eventually([&] { return host->cleanup_scan(req).count == 0; }));
  host->close();
}

TEST_CASE("a leader between two programs is looked for again, not taken for gone") {
  // A restarted node finds a leader by its marker; one exec'ing its workload
  // at that moment reads `changing`.
  proc_entry leader;
  leader.pid = leader.pgrp = 4242, leader.state = 'R', leader.start_ticks = 60;
  proc_entry other = leader;
  other.pid = other.pgrp = 4343;
  std::map<pid_t, marker> now{{4242, marker::changing}, {4343, marker::absent}};
  auto env = [&](pid_t pid, std::string_view) { return now[pid]; };
  bool changing = false;
  CHECK_FALSE(find_marked_leader({leader, other}, env, "M=1", &changing));
  CHECK(changing);
  now[4242] = marker::absent;
  CHECK_FALSE(find_marked_leader({leader, other}, env, "M=1", &changing));
  CHECK_FALSE(changing); // gone for good: not looked for again
  // Settled: the third look finds it.
  int looks = 0;
  auto found = find_marked_leader_settled([&](bool* between) {
    now[4242] = ++looks < 3 ? marker::changing : marker::present;
    return find_marked_leader({leader, other}, env, "M=1", between);
  });
  REQUIRE(found);
  CHECK(found->pid == 4242);
  CHECK(looks == 3);
  looks = 0;
  CHECK_FALSE(find_marked_leader_settled([&](bool* between) {
    ++looks;
    now[4242] = marker::changing; // never settles: 10 looks, then none
    return find_marked_leader({leader, other}, env, "M=1", between);
  }));
  CHECK(looks == 10);
}

TEST_CASE("a cleanup scan waits for a process between two programs, whoever owns it") {
  // Its environment reads empty for a moment during execve: neither a
  // target nor gone, it keeps the scan from being empty, so cleanup looks
  // again. An unreadable one of another user is not ours to wait for.
  scan_request req{"alloc-1", leader_id{100, 50}, true, {}};
  proc_entry p;
  p.pid = 4242, p.ppid = 1, p.pgrp = 4242, p.state = 'R', p.start_ticks = 60;
  p.uid = ::geteuid() + 1;
  int kills = 0;
  auto kill = [&](const proc_entry&) { return ++kills > 0; };
  auto says = [](marker m) { return [m](pid_t, std::string_view) { return m; }; };
  auto changing = scan_for_cleanup(req, {p}, {}, says(marker::changing), kill);
  CHECK(changing.count == 1);
  CHECK(changing.found == "pid 4242 (start 60, state R, between two programs)");
  CHECK(scan_for_cleanup(req, {p}, {}, says(marker::unreadable), kill).count == 0);
  CHECK(scan_for_cleanup(req, {p}, {}, says(marker::absent), kill).count == 0);
  CHECK(kills == 0);
  CHECK(scan_for_cleanup(req, {p}, {}, says(marker::present), kill).count == 1);
  CHECK(kills == 1);
}

#if defined(__linux__)
TEST_CASE("a marked process between two programs reads as changing, never as absent", "[linux]") {
  // A shell that execs itself again and again, marked: each exec has a
  // moment when /proc/<pid>/environ reads empty. A cleanup scan took that
  // for "no marker" and missed the process: about one read in ten here.
  scratch s;
  auto script = s.dir / "again.sh";
  std::ofstream(script) << "[ \"$1\" -gt 0 ] && exec /bin/sh \"$0\" $(($1 - 1))\n";
  auto marker_entry = "CQ_ALLOCATION_ID=" + s.id;
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    char* const argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>(script.c_str()),
                          const_cast<char*>("1000000"), nullptr};
    char* const envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), marker_entry.data(), nullptr};
    ::execve("/bin/sh", argv, envp);
    ::_exit(127);
  }
  // Until its first exec, the child has this process's environment.
  CHECK(eventually([&] { return platform::environ_has(pid, marker_entry) == marker::present; }));
  int present = 0, changing = 0, absent = 0;
  for (int i = 0; i < 20000; ++i)
    switch (platform::environ_has(pid, marker_entry)) {
    case marker::present:
      ++present;
      break;
    case marker::changing:
      ++changing;
      break;
    case marker::absent:
      ++absent;
      break;
    case marker::unreadable:
      break;
    }
  auto live = platform::process(pid);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  REQUIRE(live);
  REQUIRE(live->state != 'Z'); // it ran all along: every read was of a live process
  INFO("present " << present << ", changing " << changing);
  CHECK(present > 0);
  CHECK(absent == 0);
}
#endif

TEST_CASE("kill_tree reaches a child that left the group, on every platform") {
  // The watchdog's kill. The child starts its own session and drops its
  // environment (env -i: no marker), so only the tree leads to it; the tree
  // must be read before the group dies, or the child is reparented away.
  scratch s;
  for (auto p : platforms()) {
    INFO("platform " << to_string(p));
    auto host = make_process_host(p);
    auto leader = host->launch(
        request(s, "if command -v setsid >/dev/null; then setsid env -i sleep 302; else perl "
                   "-MPOSIX -e 'POSIX::setsid(); exec @ARGV' env -i sleep 302; fi & "
                   "exec sleep 300"),
        {});
    REQUIRE(leader);
    std::optional<proc_entry> escaped;
    REQUIRE(eventually([&] {
      for (auto& e : platform::processes())
        if (e.ppid == leader->pid && e.pgrp != leader->pid &&
            platform::process_name(e.pid) == std::optional<std::string>("sleep"))
          escaped = e;
      return escaped.has_value();
    }));
    ending end;
    host->watch(leader->pid, end.handler());
    host->kill_tree(leader->pid);
    REQUIRE(end.wait());
    CHECK(eventually([&] {
      auto now = platform::process(escaped->pid);
      return !now || now->start_ticks != escaped->start_ticks || now->state == 'Z';
    }));
    host->close();
  }
}

TEST_CASE("write_terminal: whole frames into a FIFO with a reader, unavailable without one") {
  auto dir = fs::temp_directory_path() / ("cq-term-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto fifo = dir / terminal_fifo;
  for (auto p : platforms()) {
    auto host = make_process_host(p);
    fs::remove(fifo);
    // No FIFO, then a FIFO nobody reads: not open, said as unavailable.
    auto none = host->write_terminal(fifo, terminal_frames("x", 0, 0));
    REQUIRE_FALSE(none);
    CHECK(none.error().code == cq::errc::unavailable);
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(host->write_terminal(fifo, terminal_frames("x", 0, 0)).error().code ==
          cq::errc::unavailable);
    // A reader (as cq-shim holds it): both frames arrive whole, in order.
    int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
    REQUIRE(fd >= 0);
    auto frames = terminal_frames("ls\r", 40, 120);
    CHECK(frames == std::string("w\0\x04\0\x28\0\x78"
                                "d\0\x03ls\r",
                                13));
    REQUIRE(host->write_terminal(fifo, frames));
    char buf[64];
    CHECK(::read(fd, buf, sizeof buf) == static_cast<ssize_t>(frames.size()));
    CHECK(std::string(buf, frames.size()) == frames);
    // A full FIFO takes nothing, and says so.
    std::string big(terminal_write_max, 'k');
    while (host->write_terminal(fifo, big))
      ;
    CHECK(host->write_terminal(fifo, big).error().code == cq::errc::unavailable);
    ::close(fd);
  }
  fs::remove_all(dir);
}

namespace {

/// Waits (30 s at most) for child `pid` to end; its wait status, or -1.
int reap(pid_t pid) {
  int st = -1;
  bool done = eventually([&] { return ::waitpid(pid, &st, WNOHANG) == pid; });
  return done ? st : -1;
}

} // namespace

TEST_CASE("a workload under cq-shim keeps the launch contract and starts in its cgroup") {
  auto shim = fs::path(platform::self_exe()).parent_path() / "cq-shim";
  REQUIRE(fs::exists(shim));
  scratch s;
  // What the daemon has that a workload must not inherit.
  cq::test::daemon_leftovers leftovers;
  REQUIRE(leftovers.leak >= 0);
  // A pipe stands in for cgroup.procs: whoever joins writes its pid there.
  int procs[2];
  REQUIRE(::pipe2(procs, O_CLOEXEC) == 0);

  // The signal state is read last, by the workload's process itself after
  // an exec: a shell blocks every signal for a moment around each fork, so
  // reading the shell's from a child would race with that.
  auto r = request(s, "echo pgrp $(cut -d' ' -f5 /proc/$$/stat); echo fds; ls /proc/$$/fd; pwd; "
                      "exec grep -E '^Sig(Blk|Ign)' /proc/self/status");
  r.shim = shim.string();
  r.status_path = s.dir / "status";
  r.cgroup_procs_fd = procs[1];
  r.pidfd = false;
  auto child = launch(r);
  ::close(procs[1]);
  leftovers.restore();
  REQUIRE(child);
  int st = reap(child->pid);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  char joined[32] = {};
  CHECK(::read(procs[0], joined, sizeof joined - 1) > 0);
  ::close(procs[0]);
  CHECK(std::string(joined) == std::to_string(child->pid)); // the shim itself, before the workload
  auto log = cq::test::read_text(r.log_path);
  INFO(log);
  CHECK(log.find("pgrp " + std::to_string(child->pid) + "\n") != std::string::npos);
  CHECK(log.find("SigBlk:\t0000000000000000\n") != std::string::npos);
  CHECK(log.find("SigIgn:\t0000000000000000\n") != std::string::npos);
  // The shell's own descriptors, listed while it holds no others, then its cwd.
  CHECK(log.find("fds\n0\n1\n2\n" + s.dir.string() + "\n") != std::string::npos);
  CHECK(cq::test::read_text(r.status_path).rfind("exited 0 ", 0) == 0);
}

TEST_CASE("a workload whose cgroup cannot be joined never starts") {
  auto shim = fs::path(platform::self_exe()).parent_path() / "cq-shim";
  REQUIRE(fs::exists(shim));
  scratch s;
  int unwritable = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(unwritable >= 0);
  auto r = request(s, "touch ran");
  r.shim = shim.string();
  r.status_path = s.dir / "status";
  r.cgroup_procs_fd = unwritable;
  r.pidfd = false;
  auto child = launch(r);
  ::close(unwritable);
  if (child) { // the shim joins (posix_spawn): it ends with 125 and says why
    int st = reap(child->pid);
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 125);
    CHECK(cq::test::read_text(r.status_path) == "exited 125 0\n");
    CHECK(cq::test::read_text(r.log_path).find("cannot join the job's memory cgroup") !=
          std::string::npos);
  } else { // the launcher's child joins (fork): the launch fails
    CHECK(child.error().message.find("cgroup") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(s.dir / "ran"));
}

TEST_CASE("the platform primitives see this process") {
  auto self = platform::process(::getpid());
  REQUIRE(self);
  CHECK(self->pid == ::getpid());
  CHECK(self->ppid == ::getppid());
  CHECK(self->rss_pages > 0);
  CHECK(self->start_ticks != 0);
  auto mem = platform::memory();
  REQUIRE(mem);
  CHECK(mem->total_bytes >= mem->available_bytes);
  CHECK(platform::cpus() >= 1);
  CHECK(fs::path(platform::self_exe()).filename() == "cq_unit_tests");
  CHECK(platform::process_name(::getpid()).has_value());
  CHECK_FALSE(platform::process(-5));
  CHECK(platform::environ_has(::getpid(), "CQ_NO_SUCH_VARIABLE=1") == marker::absent);
}

TEST_CASE("macOS KERN_PROCARGS2 text: the environment follows argv and the path's padding") {
  auto text = procargs(2, {"/usr/bin/python3", "", "", "python3", "train.py", "HOME=/Users/a",
                           "CQ_ALLOCATION_ID=abc", ""});
  CHECK(procargs2_environ_has(text, "CQ_ALLOCATION_ID=abc") == marker::present);
  CHECK(procargs2_environ_has(text, "HOME=/Users/a") == marker::present);
  CHECK(procargs2_environ_has(text, "CQ_ALLOCATION_ID=ab") == marker::absent);
  // An argument equal to the needle is not the environment.
  auto in_argv = procargs(2, {"/bin/echo", "echo", "CQ_ALLOCATION_ID=abc", "PATH=/bin"});
  CHECK(procargs2_environ_has(in_argv, "CQ_ALLOCATION_ID=abc") == marker::absent);
  CHECK(procargs2_environ_has(in_argv, "PATH=/bin") == marker::present);
  // Truncated or empty text never reads past its end; text that ends with
  // argv (a restricted process's) is unreadable, not absent.
  CHECK(procargs2_environ_has("", "A=1") == marker::unreadable);
  CHECK(procargs2_environ_has(text.substr(0, 6), "A=1") == marker::unreadable);
  CHECK(procargs2_environ_has(procargs(1, {"/bin/ls", "", "ls"}), "A=1") == marker::unreadable);
  auto no_nul = procargs(0, {"/x"});
  no_nul += "A=1";
  CHECK(procargs2_environ_has(no_nul, "A=1") == marker::present);
}

TEST_CASE("platform names") {
  CHECK(parse_platform("posix") == platform_kind::posix);
  CHECK_FALSE(parse_platform("darwin"));
#if defined(__linux__)
  CHECK(parse_platform("linux") == platform_kind::linux_native);
  CHECK(to_string(default_platform()) == "linux");
  CHECK(platform::name() == "linux");
#else
  CHECK_FALSE(parse_platform("linux")); // no cgroups, no pidfds
  CHECK(default_platform() == platform_kind::posix);
#endif
}

#if defined(__linux__) // procfs.cpp: the linux platform's /proc reader
TEST_CASE("a cleanup scan reads the processes no older than asked, and the members", "[linux]") {
  auto self = read_process(::getpid());
  REQUIRE(self);
  auto has = [](const std::vector<proc_entry>& ps, pid_t pid) {
    return std::any_of(ps.begin(), ps.end(), [&](const proc_entry& p) { return p.pid == pid; });
  };
  CHECK(has(scan_processes_since(0, {}), ::getpid()));
  // Known from the scan before as older: left out (not read again) ...
  CHECK(!has(scan_processes_since(self->start_ticks + 1, {}), ::getpid()));
  // ... unless it is a member (of the allocation's cgroup), whatever its age.
  CHECK(has(scan_processes_since(self->start_ticks + 1, {::getpid()}), ::getpid()));
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  auto started = scan_processes_since(self->start_ticks, {});
  CHECK(has(started, child)); // started after this process: read
  CHECK(has(started, ::getpid()));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK(!has(scan_processes_since(self->start_ticks, {}), child));
}

TEST_CASE("when_gone answers once every process a cleanup scan killed has ended", "[linux]") {
  scratch s;
  auto host = make_process_host(platform_kind::linux_native);
  struct gone {
    std::mutex m;
    std::condition_variable cv;
    int calls = 0;
    std::function<void()> handler() {
      return [this] {
        std::lock_guard lock(m);
        ++calls;
        cv.notify_all();
      };
    }
    int wait() {
      std::unique_lock lock(m);
      cv.wait_for(lock, std::chrono::seconds(30), [&] { return calls > 0; });
      return calls;
    }
    int now() {
      std::lock_guard lock(m);
      return calls;
    }
  };
  // A child that leaves the leader's group (its own session), marked, and
  // done with its exec of sleep (a scan only waits for one between two
  // programs: it has nothing to kill then).
  auto leader = host->launch(request(s, "setsid sleep 304 & exec sleep 300"), {});
  REQUIRE(leader);
  REQUIRE(eventually([&] {
    for (auto& p : platform::processes())
      if (p.ppid == leader->pid && p.pgrp != leader->pid &&
          platform::process_name(p.pid) == "sleep" &&
          platform::environ_has(p.pid, "CQ_ALLOCATION_ID=" + s.id) == marker::present)
        return true;
    return false;
  }));
  ending end;
  host->watch(leader->pid, end.handler());
  host->kill_group(leader->pid);
  REQUIRE(end.wait());
  scan_request req{s.id, *leader, true, {}};
  auto scan = host->cleanup_scan(req);
  INFO("leader " << leader->pid << " start " << leader->start_ticks
                 << "; marked now: " << marked(s));
  REQUIRE(scan.count >= 1);
  REQUIRE_FALSE(scan.killed.empty()); // the targets (a suspect is never killed)
  gone after_scan;
  REQUIRE(host->when_gone(scan.killed, after_scan.handler()));
  REQUIRE(after_scan.wait() == 1);
  for (auto& k : scan.killed) {
    auto now = platform::process(k.pid);
    CHECK((!now || now->start_ticks != k.start_ticks || now->state == 'Z'));
  }
  // A live process: not answered before it ends. It ends by itself in a
  // minute should this case fail before killing it, and is reaped here.
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::alarm(60);
    ::pause();
    ::_exit(0);
  }
  struct reaped {
    pid_t pid;
    ~reaped() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reap{child};
  auto entry = read_process(child);
  REQUIRE(entry);
  gone live;
  REQUIRE(host->when_gone({{child, entry->start_ticks}}, live.handler()));
  CHECK(live.now() == 0); // it runs: nothing can have answered
  ::kill(child, SIGKILL);
  CHECK(live.wait() == 1);
  ::waitpid(child, nullptr, 0);
  reap.pid = -1; // reaped: the guard must not signal a pid that may be reused
  // Gone already, or a pid that names another process now: answered at once.
  gone already;
  REQUIRE(host->when_gone({{child, entry->start_ticks}, {::getpid(), 1}}, already.handler()));
  CHECK(already.now() == 1);
  host->close();
}

TEST_CASE("the confirming scan of an allocation with a cgroup reads only the cgroup's members",
          "[linux]") {
  // A cgroup.procs file in a folder stands in for the allocation's cgroup:
  // `inside` is listed in it, `outside` only carries the marker.
  scratch s;
  auto host = make_process_host(platform_kind::linux_native);
  auto inside = host->launch(request(s, "exec sleep 300"), {});
  REQUIRE(inside);
  auto outside = host->launch(request(s, "exec sleep 301"), {});
  REQUIRE(outside);
  fs::create_directories(s.dir / "cg");
  {
    std::ofstream procs(s.dir / "cg" / "cgroup.procs");
    procs << inside->pid << "\n";
  }
  scan_request req{s.id, *inside, false, {memcap_mode::cgroup_v1, s.dir / "cg"}};
  // Until both shells have exec'ed sleep: the marker is in a shell's
  // environment from its start, but an exec under way reads as without it.
  REQUIRE(eventually([&] {
    auto comm = [](pid_t pid) {
      return cq::test::read_text(fs::path("/proc") / std::to_string(pid) / "comm");
    };
    return comm(inside->pid) == "sleep\n" && comm(outside->pid) == "sleep\n" &&
           platform::environ_has(outside->pid, "CQ_ALLOCATION_ID=" + s.id) == marker::present;
  }));
  req.members_only = true;
  auto members = host->cleanup_scan(req);
  CHECK(members.count == 1);
  CHECK(members.found.find("pid " + std::to_string(inside->pid) + " ") != std::string::npos);
  CHECK(members.found.find("pid " + std::to_string(outside->pid) + " ") == std::string::npos);
  req.members_only = false; // a full scan lists /proc: the marker finds the other
  auto full = host->cleanup_scan(req);
  INFO("found: " << full.found);
  CHECK(full.found.find("pid " + std::to_string(outside->pid) + " ") != std::string::npos);
  host->close();
}
#endif

TEST_CASE("cq-shim takes --started FD from a standby of an earlier version: says X there, runs "
          "the workload") {
  // ADR 0058: standbys no longer exec cq-shim, but one started by an earlier
  // cq-shim may still do so after an upgrade, with `--started FD` first.
  auto shim = fs::path(platform::self_exe()).parent_path() / "cq-shim";
  REQUIRE(fs::exists(shim));
  scratch s;
  int told[2];
  REQUIRE(::pipe2(told, O_CLOEXEC) == 0);
  auto status = (s.dir / "status").string();
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(told[1], 9); // without O_CLOEXEC
    auto fd = std::string("9");
    ::execl(shim.c_str(), shim.c_str(), "--started", fd.c_str(), status.c_str(), "/bin/sh", "sh",
            "-c", "exit 3", static_cast<char*>(nullptr));
    ::_exit(120);
  }
  ::close(told[1]);
  char got[4] = {};
  auto n = ::read(told[0], got, sizeof got);
  ::close(told[0]);
  int st = reap(pid);
  CHECK(n == 1);
  CHECK(got[0] == 'X');
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 3);
  CHECK(cq::test::read_text(status).rfind("exited 3 ", 0) == 0);
}

#if defined(__linux__)
TEST_CASE(
    "cq-shim --standby-zygote forks standbys that are its parent's children, with the descriptors "
    "it is sent",
    "[linux]") {
  // ADR 0060: the zygote's standby is cq-node's child (CLONE_PARENT); here
  // the test stands in for cq-node. A pipe stands in for cgroup.procs.
  auto shim = fs::path(platform::self_exe()).parent_path() / "cq-shim";
  REQUIRE(fs::exists(shim));
  int zs[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, zs) == 0);
  timeval tv{30, 0}; // deadlines for every read below
  ::setsockopt(zs[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  pid_t zygote = ::fork();
  REQUIRE(zygote >= 0);
  if (zygote == 0) {
    int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0), ::dup2(null_fd, 1), ::dup2(null_fd, 2);
    ::dup2(zs[1], 3); // without O_CLOEXEC
    ::close_range(4, ~0U, 0);
    ::execl(shim.c_str(), shim.c_str(), "--standby-zygote", "3", static_cast<char*>(nullptr));
    ::_exit(120);
  }
  ::close(zs[1]);
  auto ask = [&](std::vector<int> fds) {
    cq::node::standby_wire::zygote_request req;
    req.put_fds(fds.data(), fds.size());
    REQUIRE(::sendmsg(zs[0], &req.msg, MSG_NOSIGNAL) == 1);
    std::int32_t answer = 0;
    REQUIRE(::recv(zs[0], &answer, sizeof answer, MSG_WAITALL) == sizeof answer);
    return answer;
  };
  int procs[2], ss[2];
  REQUIRE(::pipe2(procs, O_CLOEXEC) == 0);
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ss) == 0);
  ::setsockopt(ss[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto pid = ask({procs[1], ss[1]});
  ::close(procs[1]);
  ::close(ss[1]);
  REQUIRE(pid > 0);
  char ready = 0;
  CHECK(::recv(ss[0], &ready, 1, 0) == 1); // "R": it wrote its pid to the procs file first
  CHECK(ready == 'R');
  char joined[32] = {};
  CHECK(::read(procs[0], joined, sizeof joined - 1) > 0);
  CHECK(std::string(joined) == std::to_string(pid));
  auto proc = read_process(pid);
  REQUIRE(proc);
  CHECK(proc->ppid == ::getpid()); // the zygote's parent's child
  CHECK(proc->pgrp == pid);        // a process group of its own
  std::vector<std::string> fds;
  for (auto& e : fs::directory_iterator(fmt::format("/proc/{}/fd", pid)))
    fds.push_back(e.path().filename().string());
  std::sort(fds.begin(), fds.end());
  CHECK(fds == std::vector<std::string>{"0", "1", "2", "4"}); // the procs file closed once used
  // Its command line says what it is, the zygote's is as it was.
  auto cmdline = [](pid_t p) { return cq::test::read_text(fmt::format("/proc/{}/cmdline", p)); };
  using namespace std::string_literals;
  CHECK(cmdline(pid) == shim.string() + "\0--standby\0"s + "3\0"s + "4\0"s + std::string(5, '\0'));
  CHECK(cmdline(zygote) == shim.string() + "\0--standby-zygote\0"s + "3\0"s);
  ::close(ss[0]); // cq-node gone: the standby ends, reaped by us
  int st = reap(pid);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  ::close(procs[0]);
  CHECK(ask({}) == -EPROTO); // a request without descriptors forks nothing
  ::close(zs[0]);            // the zygote ends with its socket
  st = reap(zygote);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
}
#endif
