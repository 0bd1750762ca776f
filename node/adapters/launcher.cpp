#include "cq/node/launcher.hpp"
#include "cq/node/standby_wire.hpp"
#include "node/adapters/launcher.hpp"

#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#if defined(__linux__)
#include "node/adapters/linux/spawn_into_cgroup.hpp"

#include <sys/syscall.h>
#endif
#include <unistd.h>

#include <cerrno>
#include <cstring>

#if defined(__linux__) && !defined(CLOSE_RANGE_CLOEXEC)
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

// posix_spawn starts cq-shim where the C library can close every other
// descriptor and change directory as spawn actions (glibc 2.34). It shares
// the daemon's memory until the exec (no page tables copied, no
// copy-on-write faults) and the shim joins the cgroup itself, so the
// launching thread never waits for a cgroup migration (docs/adr/0034).
// Elsewhere the workload starts through Boost.Process's fork.
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 34)
#define CQ_SPAWN_SHIM 1
#endif
#endif
#if !defined(CQ_SPAWN_SHIM)
#define CQ_SPAWN_SHIM 0
#endif

namespace cq::node {

namespace bp = boost::process;

namespace {

bool has_nul(std::string_view s) {
  return s.find('\0') != std::string_view::npos;
}

bool is_executable_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

std::string join_path(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (!out.empty() && out.back() != '/')
    out += '/';
  out += name;
  return out;
}

/// The highest descriptor number + 1 this process may have open.
int descriptor_limit() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < (1u << 20))
    return static_cast<int>(rl.rlim_cur);
  return 1 << 16;
}

/// In the child between fork and exec (async-signal-safe): every descriptor
/// from `first` closes at exec. close_range on Linux; elsewhere fcntl on
/// each number below `limit`.
void mark_cloexec_from(int first, int limit) {
#if defined(__linux__)
  (void)limit;
  if (::syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, CLOSE_RANGE_CLOEXEC) == 0)
    return;
#endif
  for (int fd = first; fd < limit; ++fd)
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

#if CQ_SPAWN_SHIM
/// The shim's descriptor for the cgroup's procs file (shim.cpp's --cgroup-procs).
constexpr int shim_procs_fd = 3;

} // namespace

bus::result<pid_t> spawn_shim(const std::string& exe, const std::vector<std::string>& args,
                              const bus::env_map& env, int in_fd, int out_fd, const char* cwd,
                              const std::vector<std::pair<int, int>>& extra_fds) {
  std::vector<std::string> env_text;
  env_text.reserve(env.size());
  for (auto& [k, v] : env)
    env_text.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& e : env_text)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  posix_spawnattr_t attr;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_init(&fa);
  // A group of its own, an empty mask, every signal at its default.
  sigset_t all, none;
  ::sigfillset(&all);
  ::sigdelset(&all, SIGKILL);
  ::sigdelset(&all, SIGSTOP);
  // glibc keeps its two internal signals (32 and 33, which sigaddset
  // refuses) out of a filled set, and a spawned child would start with them
  // ignored, an ignore the shim's exec passes on to the workload. Their bits
  // are set by hand so that the spawn resets them to the default as well.
  constexpr std::size_t word_bits = 8 * sizeof(unsigned long);
  for (int sig : {32, 33})
    all.__val[static_cast<std::size_t>(sig - 1) / word_bits] |= 1UL << ((sig - 1) % word_bits);
  ::sigemptyset(&none);
  int rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                               POSIX_SPAWN_SETSIGMASK);
  rc = rc ? rc : posix_spawnattr_setpgroup(&attr, 0);
  rc = rc ? rc : posix_spawnattr_setsigdefault(&attr, &all);
  rc = rc ? rc : posix_spawnattr_setsigmask(&attr, &none);
  // dup2 clears close-on-exec on the copy; everything above stays closed.
  rc = rc ? rc : posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  rc = rc ? rc : posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  rc = rc ? rc : posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  int close_from = 3;
  for (auto [fd, as] : extra_fds) {
    rc = rc ? rc : posix_spawn_file_actions_adddup2(&fa, fd, as);
    close_from = std::max(close_from, as + 1);
  }
  rc = rc ? rc : posix_spawn_file_actions_addclosefrom_np(&fa, close_from);
  rc = rc ? rc : posix_spawn_file_actions_addchdir_np(&fa, cwd);
  pid_t pid = -1;
  if (rc == 0)
    rc = ::posix_spawn(&pid, exe.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return bus::error_info{errc::internal,
                           fmt::format("cannot start {}: {}", exe, std::strerror(rc))};
  return pid;
}

namespace {
#endif

#if CQ_SPAWN_SHIM
/// Hands a standby cq-shim (shim_standby.cpp) the exec of `exe` with `args`
/// and `env` in `cwd`, with `null_fd` as stdin and `log_fd` as stdout and
/// stderr; waits until it has exec'ed (the socket closes) or says why not.
status hand_to_standby(int sock, const std::string& exe, const std::vector<std::string>& args,
                       const bus::env_map& env, int log_fd, int null_fd, const char* cwd) {
  std::string payload;
  auto add = [&](std::string_view s) {
    payload.append(s);
    payload.push_back('\0');
  };
  add(cwd);
  add(std::to_string(args.size() + 1));
  add(exe);
  for (auto& a : args)
    add(a);
  for (auto& [k, v] : env)
    add(k + "=" + v);
  if (payload.size() > standby_wire::max_payload)
    return bus::error_info{errc::invalid_argument,
                           "the job's arguments and environment are too large"};
  standby_wire::header h;
  h.data = static_cast<std::uint32_t>(payload.size());
  int fds[standby_wire::fds] = {null_fd, log_fd};
  h.put_fds(fds, standby_wire::fds);
  auto failed = [](const char* what) {
    return bus::error_info{errc::internal,
                           fmt::format("the standby cq-shim {}: {}", what, std::strerror(errno))};
  };
  if (::sendmsg(sock, &h.msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof h.data))
    return failed("did not take the request");
  for (std::size_t at = 0; at < payload.size();) {
    auto n = ::send(sock, payload.data() + at, payload.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return failed("did not take the request");
    at += static_cast<std::size_t>(n);
  }
  // The standby says "X" as it runs cq-shim in place (ADR 0058); a failure
  // before it, "E" and errno. A close with neither is a standby that died:
  // not started.
  char got[1 + sizeof(std::uint32_t)] = {};
  std::size_t have = 0;
  while (have < 1 || (got[0] == 'E' && have < sizeof got)) {
    pollfd p{sock, POLLIN, 0};
    int rc;
    do
      rc = ::poll(&p, 1, 5000);
    while (rc < 0 && errno == EINTR);
    if (rc <= 0) {
      errno = rc == 0 ? ETIMEDOUT : errno;
      return failed("did not take the job in time");
    }
    auto n = ::read(sock, got + have, sizeof got - have);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      errno = n == 0 ? ECHILD : errno;
      return failed("ended before it took the job");
    }
    have += static_cast<std::size_t>(n);
  }
  if (got[0] == 'X')
    return done{};
  std::uint32_t err = 0;
  std::memcpy(&err, got + 1, sizeof err);
  errno = got[0] == 'E' ? static_cast<int>(err) : EPROTO;
  return failed("could not start the job");
}
#endif

/// The launched child with its pidfd when `want` (Linux); off Linux none.
bus::result<launched_child> with_pidfd(pid_t pid, bool want);

} // namespace

bus::result<std::string> resolve_program(const std::string& argv0, std::string_view path_var,
                                         const std::string& cwd) {
  if (argv0.empty())
    return bus::error_info{errc::invalid_argument, "argv[0] is empty"};
  if (argv0.find('/') != std::string::npos) {
    auto full = argv0.front() == '/' ? argv0 : join_path(cwd, argv0);
    if (!is_executable_file(full))
      return bus::error_info{errc::not_found, fmt::format("{}: not an executable file", argv0)};
    return argv0; // exec'ed after the chdir, so a relative path works as given
  }
  std::string_view rest = path_var;
  for (;;) {
    auto colon = rest.find(':');
    auto dir = rest.substr(0, colon);
    std::string base = dir.empty() ? cwd : std::string(dir);
    if (!base.empty() && base.front() != '/')
      base = join_path(cwd, base);
    auto candidate = join_path(base, argv0);
    if (is_executable_file(candidate))
      return candidate;
    if (colon == std::string_view::npos)
      break;
    rest.remove_prefix(colon + 1);
  }
  return bus::error_info{errc::not_found,
                         fmt::format("{}: command not found in PATH={}", argv0, path_var)};
}

bus::result<launched_child> launch(const launch_request& req) {
  // ---- validate (nothing may reach fork that exec would choke on) ----
  if (req.argv.empty())
    return bus::error_info{errc::invalid_argument, "argv is empty"};
  for (auto& a : req.argv)
    if (has_nul(a))
      return bus::error_info{errc::invalid_argument, "argv contains a NUL byte"};
  for (auto& [k, v] : req.env)
    if (k.empty() || k.find('=') != std::string::npos || has_nul(k) || has_nul(v))
      return bus::error_info{errc::invalid_argument,
                             fmt::format("env: invalid variable name '{}'", k)};
  if (req.cwd.empty() || req.cwd.front() != '/' || has_nul(req.cwd))
    return bus::error_info{errc::invalid_argument,
                           fmt::format("cwd '{}' is not an absolute path", req.cwd)};
  struct stat st {};
  if (::stat(req.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return bus::error_info{errc::invalid_argument, fmt::format("cwd {}: not a directory", req.cwd)};
  auto path_it = req.env.find("PATH");
  auto program = resolve_program(
      req.argv[0], path_it != req.env.end() ? std::string_view(path_it->second) : default_path,
      req.cwd);
  if (!program)
    return program.error();

  // ---- descriptors handed to the child ----
  int log_fd = ::open(req.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log_fd < 0)
    return bus::error_info{errc::internal, fmt::format("cannot open {}: {}", req.log_path.string(),
                                                       std::strerror(errno))};
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    ::close(log_fd);
    return bus::error_info{errc::internal, "cannot open /dev/null"};
  }

  std::vector<std::string> args;
  std::string exe = *program;
  if ((req.as || !req.output_path.empty() || !req.terminal.empty()) && req.shim.empty()) {
    ::close(log_fd), ::close(null_fd);
    return bus::error_info{errc::internal, req.as                  ? "run-as needs cq-shim"
                                           : !req.terminal.empty() ? "--pty needs cq-shim"
                                                                   : "--output needs cq-shim"};
  }
  if (!req.terminal.empty()) {
    // Root's own (the shim reads it before any drop); 0600: nobody else
    // types into the job.
    ::unlink(req.terminal.c_str());
    if (::mkfifo(req.terminal.c_str(), 0600) != 0) {
      auto why = std::strerror(errno);
      ::close(log_fd), ::close(null_fd);
      return bus::error_info{errc::internal,
                             fmt::format("cannot make {}: {}", req.terminal.string(), why)};
    }
  }
  if (req.as) {
    for (auto& p : req.owned)
      if (::lchown(p.c_str(), req.as->uid, req.as->gid) != 0) {
        auto why = std::strerror(errno);
        ::close(log_fd), ::close(null_fd);
        return bus::error_info{errc::internal, fmt::format("cannot give {} to user {}: {}",
                                                           p.string(), req.as->user, why)};
      }
  }
  if (!req.shim.empty()) {
    // cq-shim [--as UID GID GROUPS] STATUS_FILE PROGRAM ARGV0 ARGS...: the
    // workload keeps its argv[0].
    exe = req.shim;
    if (req.as) {
      std::string groups;
      for (auto g : req.as->groups)
        groups += (groups.empty() ? "" : ",") + std::to_string(g);
      args.insert(args.end(), {"--as", std::to_string(req.as->uid), std::to_string(req.as->gid),
                               groups.empty() ? "-" : groups});
    }
    if (!req.output_path.empty())
      args.insert(args.end(), {"--output", req.output_path});
    if (!req.terminal.empty())
      args.insert(args.end(), {"--pty", req.terminal.string()});
    args.push_back(req.status_path.string());
    args.push_back(*program);
    args.insert(args.end(), req.argv.begin(), req.argv.end());
  } else {
    args.assign(req.argv.begin() + 1, req.argv.end());
  }
  const char* cwd = req.cwd.c_str();
  const int procs_fd = req.cgroup_procs_fd;
  // Read before fork: the child may only make async-signal-safe calls.
  const int open_max = descriptor_limit();

#if CQ_SPAWN_SHIM
  if (!req.shim.empty() && req.standby_sock >= 0) {
    auto handed = hand_to_standby(req.standby_sock, exe, args, req.env, log_fd, null_fd, cwd);
    ::close(log_fd);
    ::close(null_fd);
    if (!handed)
      return handed.error();
    return launched_child{-1, -1};
  }
  if (!req.shim.empty()) {
#if defined(__linux__)
    // Born in its cgroup v2 group where the kernel offers it (ADR 0050).
    if (req.cgroup_dir_fd >= 0) {
      std::vector<std::string> env_text;
      env_text.reserve(req.env.size());
      for (auto& [k, v] : req.env)
        env_text.push_back(k + "=" + v);
      auto s = spawn_into_cgroup(exe, args, env_text, null_fd, log_fd, cwd, req.cgroup_dir_fd);
      if (!s.unsupported || procs_fd < 0) {
        ::close(log_fd);
        ::close(null_fd);
        if (s.pid < 0)
          return bus::error_info{errc::internal, fmt::format("cannot start {} in its cgroup: {}",
                                                             exe, std::strerror(s.error))};
        return with_pidfd(s.pid, req.pidfd);
      }
    }
#endif
    // Else the shim joins the memory cgroup itself, before the workload starts.
    std::vector<std::pair<int, int>> extra;
    if (procs_fd >= 0) {
      extra.emplace_back(procs_fd, shim_procs_fd);
      args.insert(args.begin(), {"--cgroup-procs", std::to_string(shim_procs_fd)});
    }
    auto spawned = spawn_shim(exe, args, req.env, null_fd, log_fd, cwd, extra);
    ::close(log_fd);
    ::close(null_fd);
    if (!spawned)
      return spawned.error();
    return with_pidfd(*spawned, req.pidfd);
  }
#endif
  // The fork path's environment (the spawn path above passes req.env as it
  // is). set(), not operator[]: Boost 1.74's environment::find compares the
  // key with memcmp over the key's length and reads past shorter entries
  // (AddressSanitizer caught it); set() checks the length first.
  bp::environment env;
  for (auto& [k, v] : req.env)
    env.set(k, v);
  bp::group group;
  std::error_code ec;
  pid_t failed_pid = -1;
  bp::child child;
  try {
    child = bp::child(
        bp::exe = exe, bp::args = args, bp::env = env, group,
        // Runs in the child between fork and exec: async-signal-safe calls only.
        bp::extend::on_exec_setup =
            [&](auto& exec) {
              // Default dispositions and an empty mask, whatever the daemon inherited
              // (a shell starts background jobs with SIGINT and SIGQUIT ignored).
              struct sigaction dfl {};
              dfl.sa_handler = SIG_DFL;
              ::sigemptyset(&dfl.sa_mask);
              for (int sig = 1; sig < NSIG; ++sig)
                if (sig != SIGKILL && sig != SIGSTOP)
                  ::sigaction(sig, &dfl, nullptr);
              sigset_t none;
              ::sigemptyset(&none);
              ::sigprocmask(SIG_SETMASK, &none, nullptr);
              const char* what = nullptr;
              if (procs_fd >= 0) {
                // Join the allocation's memory cgroup before exec (no uncapped window).
                char num[24];
                int len = 0;
                char rev[24];
                for (auto v = static_cast<unsigned long>(::getpid()); v > 0 || len == 0; v /= 10)
                  rev[len++] = static_cast<char>('0' + v % 10);
                for (int i = 0; i < len; ++i)
                  num[i] = rev[len - 1 - i];
                if (::write(procs_fd, num, static_cast<std::size_t>(len)) != len) {
                  exec.set_error(std::error_code(errno, std::system_category()),
                                 "joining the memory cgroup failed");
                  ::_exit(127);
                }
              }
              if (::dup2(null_fd, 0) < 0 || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0)
                what = "redirecting stdin/stdout/stderr failed";
              else if (::chdir(cwd) != 0)
                what = "chdir to the job's cwd failed";
              if (what) {
                // Report through Boost's error pipe, then never reach exec.
                exec.set_error(std::error_code(errno, std::system_category()), what);
                ::_exit(127);
              }
              // Everything above fd 2 closes at exec (Boost's own error pipe already
              // does); the daemon's sockets, pidfds and files never leak into jobs.
              mark_cloexec_from(3, open_max);
            },
        bp::extend::on_error = [&](auto& exec, const std::error_code&) { failed_pid = exec.pid; },
        ec);
  } catch (const std::exception& e) {
    // With an error_code argument Boost reports through `ec`; this is a last resort.
    ::close(log_fd);
    ::close(null_fd);
    return bus::error_info{errc::internal, fmt::format("launch failed: {}", e.what())};
  }
  ::close(log_fd);
  ::close(null_fd);
  if (ec || !child.valid()) {
    // A child that failed before exec has _exit'ed: reap it so no zombie stays.
    if (failed_pid > 0) {
      while (::waitpid(failed_pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    return bus::error_info{errc::internal, fmt::format("cannot start {}: {}", req.argv[0],
                                                       ec ? ec.message() : "unknown error")};
  }
  pid_t pid = child.id();
  child.detach();
  group.detach();
  return with_pidfd(pid, req.pidfd);
}

namespace {

bus::result<launched_child> with_pidfd(pid_t pid, bool want) {
#if !defined(__linux__)
  (void)want;
  return launched_child{pid, -1}; // no pidfds here
#else
  if (!want)
    return launched_child{pid, -1};
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    int err = errno;
    ::killpg(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return bus::error_info{errc::internal,
                           fmt::format("pidfd_open failed: {}", std::strerror(err))};
  }
  return launched_child{pid, pidfd};
#endif
}

} // namespace

status write_terminal_fifo(const std::filesystem::path& fifo, std::string_view frames) {
  // Non-blocking both ways: no reader is ENXIO at once, a full pipe EAGAIN;
  // a write of at most PIPE_BUF bytes is whole or nothing.
  int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENXIO || errno == ENOENT)
      return bus::error_info{errc::unavailable, "the terminal is not open"};
    return bus::error_info{errc::internal,
                           fmt::format("cannot open {}: {}", fifo.string(), std::strerror(errno))};
  }
  ssize_t w;
  do
    w = ::write(fd, frames.data(), frames.size());
  while (w < 0 && errno == EINTR);
  auto err = errno;
  ::close(fd);
  if (w == static_cast<ssize_t>(frames.size()))
    return done{};
  if (w < 0 && err == EAGAIN)
    return bus::error_info{errc::unavailable, "the terminal is busy: try again"};
  return bus::error_info{errc::internal, fmt::format("cannot write {}: {}", fifo.string(),
                                                     w < 0 ? std::strerror(err) : "a short write")};
}

} // namespace cq::node
