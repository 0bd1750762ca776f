#include "node/adapters/linux/procfs.hpp"
#include "node/adapters/files.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>

namespace cq::node {

namespace {

/// Whether this process may read every process's environment: root with
/// CAP_SYS_PTRACE in its effective set (a container's root may lack it).
bool reads_every_environ() {
  if (::geteuid() != 0)
    return false;
  auto status = read_file_bounded("/proc/self/status", 64 * 1024);
  if (!status)
    return false;
  constexpr std::string_view key = "\nCapEff:";
  auto at = status->find(key);
  if (at == std::string::npos)
    return false;
  auto rest = std::string_view(*status).substr(at + key.size());
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
    rest.remove_prefix(1);
  std::uint64_t caps = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), caps, 16);
  constexpr int cap_sys_ptrace = 19;
  return ec == std::errc() && end != rest.data() && (caps >> cap_sys_ptrace & 1) != 0;
}

/// Reads /proc/<name>/stat into `out`; with `owner`, its owner too, else
/// the owner is unknown_uid. The owner matters only where an environment
/// can be unreadable (scan_for_cleanup's suspects), which it never is to a
/// node that may trace every process: its scans skip the fstat.
bool read_at(int dfd, const char* name, proc_entry& out, bool owner) {
  char path[64];
  auto n = fmt::format_to_n(path, sizeof path - 1, "{}/stat", name);
  *n.out = '\0';
  int fd = ::openat(dfd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  char buf[1024];
  struct stat st {};
  bool have_owner = !owner || ::fstat(fd, &st) == 0;
  auto len = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (len <= 0 || !have_owner)
    return false;
  out.uid = owner ? st.st_uid : proc_entry::unknown_uid;
  return parse_stat_line(std::string_view(buf, static_cast<std::size_t>(len)), out);
}

/// Whether a scan needs each process's owner (see read_at).
bool scans_need_owner() {
  static const bool need = !reads_every_environ();
  return need;
}

/// Calls `visit(dfd, entry)` for each process's directory in /proc (`dfd`:
/// /proc itself, for openat).
template <class F>
void each_process_dir(F&& visit) {
  DIR* dir = ::opendir("/proc");
  if (!dir)
    return;
  int dfd = ::dirfd(dir);
  while (auto* e = ::readdir(dir))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9') // not a process otherwise
      visit(dfd, *e);
  ::closedir(dir);
}

} // namespace

std::optional<proc_entry> read_process(pid_t pid) {
  int dfd = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return std::nullopt;
  proc_entry e;
  auto name = std::to_string(pid);
  bool ok = read_at(dfd, name.c_str(), e, true);
  ::close(dfd);
  if (!ok)
    return std::nullopt;
  return e;
}

std::vector<proc_entry> scan_processes() {
  std::vector<proc_entry> out;
  each_process_dir([&](int dfd, const dirent& e) {
    proc_entry p;
    if (read_at(dfd, e.d_name, p, scans_need_owner()))
      out.push_back(p);
  });
  return out;
}

namespace {

/// What the last scan_processes_since() read of each process: its start
/// time, which never changes, under the inode of its /proc/<pid>. A pid
/// reused by a new process gets a new inode (procfs drops the old entry
/// once its task is gone), and so does a process whose entry the kernel
/// evicted: either is read again.
struct start_seen {
  ino_t ino = 0;
  std::uint64_t start_ticks = 0;
};

std::mutex seen_mutex;
std::unordered_map<pid_t, start_seen> seen_starts; // guarded by seen_mutex

} // namespace

std::vector<proc_entry> scan_processes_since(std::uint64_t min_start_ticks,
                                             const std::vector<pid_t>& always) {
  std::vector<proc_entry> out;
  std::lock_guard lock(seen_mutex);
  std::unordered_map<pid_t, start_seen> now;
  now.reserve(seen_starts.size() + 16);
  each_process_dir([&](int dfd, const dirent& e) {
    pid_t pid = 0;
    if (std::from_chars(e.d_name, e.d_name + std::strlen(e.d_name), pid).ec != std::errc())
      return;
    bool member = std::find(always.begin(), always.end(), pid) != always.end();
    auto it = seen_starts.find(pid);
    if (!member && it != seen_starts.end() && it->second.ino == e.d_ino &&
        it->second.start_ticks < min_start_ticks) {
      now.emplace(pid, it->second); // older than asked for: not read again
      return;
    }
    proc_entry p;
    if (!read_at(dfd, e.d_name, p, scans_need_owner()))
      return;
    now.emplace(pid, start_seen{e.d_ino, p.start_ticks});
    if (member || p.start_ticks >= min_start_ticks)
      out.push_back(p);
  });
  seen_starts = std::move(now);
  return out;
}

namespace {

/// /proc/<pid>/environ's text, or the marker its read failed with.
std::variant<std::string, marker> read_environ(pid_t pid) {
  char path[64];
  auto n = fmt::format_to_n(path, sizeof path - 1, "/proc/{}/environ", pid);
  *n.out = '\0';
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == EACCES || errno == EPERM ? marker::unreadable : marker::absent;
  std::string env;
  char buf[8192];
  for (;;) {
    auto r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      return err == EACCES || err == EPERM ? marker::unreadable : marker::absent;
    }
    if (r == 0)
      break;
    env.append(buf, static_cast<std::size_t>(r));
    if (env.size() > (16u << 20))
      break;
  }
  ::close(fd);
  return env;
}

} // namespace

marker environ_has(pid_t pid, std::string_view needle) {
  // An empty read is a process between two programs (in execve), a read
  // that opened the memory of the program an exec replaced, or a process
  // whose environment is empty (env -i). Its stat, read after, tells them
  // apart (stat_env_area). An exec takes microseconds: the environment is
  // read again a moment later, a few times, before the process is called
  // `changing` (a cleanup scan then looks again a poll later). An exec also
  // shows an empty area for an instant, as it copies the environment in: an
  // empty area is taken for env -i when a second look, a moment later,
  // shows it again.
  bool empty_seen = false;
  for (int attempt = 0;; ++attempt) {
    auto env = read_environ(pid);
    if (auto* m = std::get_if<marker>(&env))
      return *m;
    auto& text = std::get<std::string>(env);
    if (!text.empty())
      return environ_list_has(text, needle) ? marker::present : marker::absent;
    auto stat = read_file_bounded(fmt::format("/proc/{}/stat", pid), 4096);
    if (!stat)
      return marker::absent; // gone
    auto area = stat_env_area(*stat);
    if (area == env_area::unknown || (area == env_area::empty && std::exchange(empty_seen, true)))
      return marker::absent;
    if (attempt == 3)
      return area == env_area::empty ? marker::absent : marker::changing;
    if (area != env_area::some)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool signal_same_process(pid_t pid, std::uint64_t start_ticks, int sig) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0)
    return false;
  auto now = read_process(pid);
  bool ok = false;
  if (now && now->start_ticks == start_ticks)
    ok = ::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0) == 0;
  ::close(fd);
  return ok;
}

// ---- memory and CPUs ----------------------------------------------------------------

std::optional<mem_info> read_meminfo() {
  // Read with a fixed stack buffer: the two lines we need are at the top.
  int fd = ::open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::nullopt;
  char buf[4096];
  std::size_t len = 0;
  while (len < sizeof buf) {
    auto n = ::read(fd, buf + len, sizeof buf - len);
    if (n <= 0)
      break;
    len += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return parse_meminfo(std::string_view(buf, len));
}

void sample_group_rss(std::span<group_rss> groups) {
  for (auto& g : groups)
    g.rss_bytes = 0;
  if (groups.empty())
    return;
  static const auto page = static_cast<std::uint64_t>(std::max(1L, ::sysconf(_SC_PAGESIZE)));
  char path[64];
  char buf[1024];
  each_process_dir([&](int dfd, const dirent& e) {
    auto n = fmt::format_to_n(path, sizeof path - 1, "{}/stat", e.d_name);
    *n.out = '\0';
    int fd = ::openat(dfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return; // exited meanwhile
    auto len = ::read(fd, buf, sizeof buf);
    ::close(fd);
    if (len <= 0)
      return;
    auto st = parse_proc_stat(std::string_view(buf, static_cast<std::size_t>(len)));
    if (!st)
      return;
    for (auto& g : groups)
      if (g.pgid == st->pgrp)
        g.rss_bytes += st->rss_pages * page;
  });
}

std::uint64_t cpu_count() {
  auto n = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (n > 0)
    return static_cast<std::uint64_t>(n);
  auto h = std::thread::hardware_concurrency();
  return h > 0 ? h : 1;
}

} // namespace cq::node
