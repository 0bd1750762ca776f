#include "sys.hpp"

#include "cq/bus/wakeup.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__APPLE__)
#include <mach-o/dyld.h> // _NSGetExecutablePath
#include <sys/random.h>  // getentropy
#endif

#include <random>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

extern char** environ;

namespace cq::cli::sys {

namespace {

/// A TCP connect to `a`: why nothing listens there (refused, or the host or
/// network unreachable, within `timeout_ms`), or nullopt (it connected, or
/// was slow: left to the call).
std::optional<std::string> refused_at(const addrinfo& a, int timeout_ms) {
  int fd = ::socket(a.ai_family, SOCK_STREAM, 0);
  if (fd < 0)
    return std::nullopt;
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  int rc = ::connect(fd, a.ai_addr, a.ai_addrlen);
  int err = rc == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    err = 0;
    if (::poll(&p, 1, timeout_ms) == 1) {
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
  }
  ::close(fd);
  if (err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH)
    return std::string(std::strerror(err));
  return std::nullopt;
}

} // namespace

tcp_probe probe_tcp(std::string_view endpoint, int timeout_ms) {
  constexpr std::string_view scheme = "tcp://";
  tcp_probe out;
  if (!endpoint.starts_with(scheme))
    return out;
  auto rest = endpoint.substr(scheme.size());
  auto colon = rest.rfind(':');
  if (colon == std::string_view::npos || rest.find(';') != std::string_view::npos)
    return out; // no port, or a source address (tcp://SRC;HOST:PORT): ZeroMQ's
  std::string host(rest.substr(0, colon));
  std::string port(rest.substr(colon + 1));
  bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  if (bracketed)
    host = host.substr(1, host.size() - 2);
  if (host == "*")
    host = "127.0.0.1";
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos)
    return out; // ZeroMQ refuses the endpoint itself, naming it
  if (auto number = port.size() <= 5 ? std::stoi(port) : 0; number < 1 || number > 65535) {
    out.unresolved = true;
    out.why = fmt::format("port {} is not 1 to 65535", port);
    return out;
  }
  if (!bracketed && host.find(':') != std::string::npos) {
    out.unresolved = true;
    out.why = fmt::format("an IPv6 address goes in brackets: tcp://[{}]:{}", host, port);
    return out;
  }
  // The one lookup of this invocation: ZeroMQ is then given the address
  // that did not refuse, so it does not ask the name service again. IPv4
  // for a name, as ZeroMQ resolves it without its IPv6 option; a bracketed
  // literal as it is (the client sets the option for it).
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = bracketed ? AF_UNSPEC : AF_INET;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &ai); rc != 0 || !ai) {
    out.unresolved = true;
    out.why = fmt::format("'{}' does not resolve: {}", host,
                          rc == 0            ? "no address"
                          : rc == EAI_SYSTEM ? std::strerror(errno)
                                             : ::gai_strerror(rc));
    return out;
  }
  // Each address in turn: the first that does not refuse is the one.
  for (auto* a = ai; a; a = a->ai_next) {
    char numeric[NI_MAXHOST] = {};
    if (::getnameinfo(a->ai_addr, a->ai_addrlen, numeric, sizeof numeric, nullptr, 0,
                      NI_NUMERICHOST) != 0)
      continue;
    auto why = refused_at(*a, timeout_ms);
    if (!why) {
      out.why.reset();
      out.endpoint = a->ai_family == AF_INET6 ? fmt::format("tcp://[{}]:{}", numeric, port)
                                              : fmt::format("tcp://{}:{}", numeric, port);
      break;
    }
    out.why = host == numeric ? *why : fmt::format("{} at {}", *why, numeric);
  }
  ::freeaddrinfo(ai);
  return out;
}

bool unix_socket_accepts(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path)
    return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

namespace fs = std::filesystem;

bool stdout_is_terminal() {
  return ::isatty(STDOUT_FILENO) == 1;
}

namespace {

/// The columns of the terminal `fd` writes to; 0 when it says none (or fewer
/// than 20).
std::size_t tty_columns(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
    return ws.ws_col;
  return 0;
}

} // namespace

std::size_t terminal_width() {
  if (const char* c = std::getenv("COLUMNS"); c && *c) {
    char* end = nullptr;
    auto v = std::strtoul(c, &end, 10);
    if (end && *end == '\0' && v >= 20 && v <= 10000)
      return v;
  }
  return stdout_is_terminal() ? tty_columns(STDOUT_FILENO) : 0;
}

std::size_t stderr_terminal_width() {
  if (::isatty(STDERR_FILENO) != 1)
    return 0;
  auto cols = tty_columns(STDERR_FILENO);
  return cols ? cols : 80;
}

bool colour_wanted() {
  if (const char* f = std::getenv("CLICOLOR_FORCE"); f && *f && std::strcmp(f, "0") != 0)
    return true;
  if (const char* n = std::getenv("NO_COLOR"); n && *n)
    return false;
  if (const char* t = std::getenv("TERM"); t && std::strcmp(t, "dumb") == 0)
    return false;
  return stdout_is_terminal();
}

std::int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::int64_t mono_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

void sleep_ms(std::int64_t ms) {
  if (ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

bus::env_map environment() {
  bus::env_map out;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0)
      continue;
    out.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return out;
}

std::string current_dir() {
  std::error_code ec;
  auto p = fs::current_path(ec);
  return ec ? std::string() : p.string();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

std::string user_name() {
  if (auto u = std::getenv("USER"); u && *u)
    return u;
  if (auto pw = getpwuid(getuid()); pw && pw->pw_name)
    return pw->pw_name;
  return std::to_string(getuid());
}

namespace {

bool is_executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
}

/// Folder of the running executable, empty if unknown.
fs::path self_dir() {
#if defined(__APPLE__)
  char buf[4096];
  std::uint32_t size = sizeof buf;
  if (_NSGetExecutablePath(buf, &size) != 0)
    return {};
  std::error_code ec;
  auto exe = fs::canonical(buf, ec);
#else
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
#endif
  if (ec)
    return {};
  return exe.parent_path();
}

/// Opens the file actions shared by both spawns: stdin from /dev/null and
/// `stderr` appended to `log_path`.
bool setup_actions(posix_spawn_file_actions_t& fa, const std::string& log_path) {
  posix_spawn_file_actions_init(&fa);
  return posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) == 0 &&
         posix_spawn_file_actions_addopen(&fa, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                          0644) == 0;
}

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const auto& a : argv)
    out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

} // namespace

std::string find_program(std::string_view name) {
  if (auto dir = self_dir(); !dir.empty()) {
    for (const auto& cand :
         {dir / name, dir / ".." / "coordinator" / name, dir / ".." / "node" / name}) {
      if (is_executable(cand))
        return fs::weakly_canonical(cand).string();
    }
  }
  if (auto path = std::getenv("PATH"); path) {
    std::string_view rest(path);
    while (!rest.empty()) {
      auto colon = rest.find(':');
      auto dir = rest.substr(0, colon);
      if (!dir.empty()) {
        auto cand = fs::path(dir) / name;
        if (is_executable(cand))
          return cand.string();
      }
      if (colon == std::string_view::npos)
        break;
      rest.remove_prefix(colon + 1);
    }
  }
  return {};
}

bus::result<int> spawn_detached(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  int rc = 0;
  if (!setup_actions(fa, log_path) || posix_spawn_file_actions_adddup2(&fa, 2, 1) != 0)
    rc = EINVAL;
  if (rc == 0)
    rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  pid_t pid = -1;
  if (rc == 0) {
    auto args = c_argv(argv);
    rc = posix_spawn(&pid, args[0], &fa, &attr, args.data(), environ);
  }
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return bus::error_info{errc::internal,
                           fmt::format("cannot start {}: {}", argv[0], std::strerror(rc))};
  return static_cast<int>(pid);
}

bus::result<std::string> run_capture(const std::vector<std::string>& argv,
                                     const std::string& log_path, std::int64_t timeout_ms) {
  int fds[2];
  if (!bus::cloexec_pipe(fds))
    return bus::error_info{errc::internal, fmt::format("pipe: {}", std::strerror(errno))};
  posix_spawn_file_actions_t fa;
  int rc = 0;
  if (!setup_actions(fa, log_path) || posix_spawn_file_actions_adddup2(&fa, fds[1], 1) != 0)
    rc = EINVAL;
  pid_t pid = -1;
  if (rc == 0) {
    auto args = c_argv(argv);
    rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  }
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return bus::error_info{errc::internal,
                           fmt::format("cannot start {}: {}", argv[0], std::strerror(rc))};
  }
  // Read until EOF or the deadline; output beyond the cap is drained, not kept.
  constexpr std::size_t max_kept = 64 << 10;
  std::string out;
  bool timed_out = false;
  auto deadline = mono_ms() + timeout_ms;
  for (;;) {
    auto left = deadline - mono_ms();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    auto n = poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      continue;
    char buf[4096];
    auto got = read(fds[0], buf, sizeof(buf));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break;
    if (out.size() < max_kept)
      out.append(buf, static_cast<std::size_t>(got));
  }
  close(fds[0]);
  if (timed_out)
    kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return bus::error_info{errc::internal, fmt::format("{} did not finish within {} ms (log: {})",
                                                       argv[0], timeout_ms, log_path)};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    auto how = WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                 : fmt::format("signal {}", WTERMSIG(status));
    return bus::error_info{errc::internal,
                           fmt::format("{} failed with {} (log: {})", argv[0], how, log_path)};
  }
  return out;
}

bool pid_alive(int pid) {
  if (pid <= 0)
    return false;
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) == pid)
    return false; // our child, now reaped
  if (kill(pid, 0) != 0 && errno != EPERM)
    return false;
  // A zombie whose parent does not reap it still answers kill(0).
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  if (stat) {
    std::string line;
    std::getline(stat, line);
    auto paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z')
      return false;
  }
  return true;
}

bool runs_program(int pid, std::string_view program) {
  if (!pid_alive(pid))
    return false;
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid));
  if (!in)
    return !fs::exists("/proc/self"); // no /proc: trust the pid
  std::string argv0;
  std::getline(in, argv0, '\0');
  return fs::path(argv0).filename() == program;
}

bool terminate(int pid) {
  return pid > 0 && kill(pid, SIGTERM) == 0;
}

/// Writes `content` to `file` with exactly `mode`, replacing it (through a
/// temporary file and rename, so a reader never sees half of it). With
/// `exclusive`, an existing file is an error instead.
bus::result<bool> write_file(const std::filesystem::path& file, std::string_view content,
                             mode_t mode, bool exclusive) {
  auto tmp = file.string() + ".tmp";
  // O_NOFOLLOW: a symbolic link planted at the temporary name is not written
  // through. open() applies `mode` only to a file it creates, so a leftover
  // temporary file (from a crash, or made by hand) would keep its own
  // permissions; fchmod() sets `mode` either way, so a token is never written
  // into a file that others can read.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  auto err = [&] {
    return bus::error_info{errc::internal,
                           fmt::format("cannot write {}: {}", file.string(), std::strerror(errno))};
  };
  if (fd < 0)
    return err();
  if (::fchmod(fd, mode) != 0) {
    auto e = err();
    ::close(fd);
    return e;
  }
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ok = ::fsync(fd) == 0 && ok;
  ::close(fd);
  if (!ok)
    return err();
  if (exclusive) {
    // link() fails if the target exists: no token is ever overwritten.
    if (::link(tmp.c_str(), file.c_str()) != 0) {
      auto e = err();
      ::unlink(tmp.c_str());
      return e;
    }
    ::unlink(tmp.c_str());
    return true;
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0)
    return err();
  return true;
}

std::string random_uuid() {
  // getentropy (glibc 2.25, macOS 10.12) is one system call; std::random_device
  // first asks the CPU what it offers (cpuid), which traps to the hypervisor
  // on a VM: about 1% of a `cq submit`'s CPU. It stays as the fallback.
  unsigned char b[16];
  if (::getentropy(b, sizeof b) != 0) {
    std::random_device rd;
    std::uniform_int_distribution<unsigned> byte(0, 255);
    for (auto& x : b)
      x = static_cast<unsigned char>(byte(rd));
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      out += '-';
    out += fmt::format("{:02x}", b[i]);
  }
  return out;
}

bool read_input(int timeout_ms, std::string& out) {
  pollfd p{0, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR)))
    return true;
  char buf[4096];
  auto n = read(0, buf, sizeof buf);
  if (n > 0)
    out.append(buf, static_cast<std::size_t>(n));
  return n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN));
}

} // namespace cq::cli::sys
