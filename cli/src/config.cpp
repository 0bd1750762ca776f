#include "cq/cli/config.hpp"
#include "cq/bus/curve.hpp"
#include "cq/bus/local_wire.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

namespace cq::cli {

namespace {

/// The value of an environment variable, "" when unset.
std::string env_or_empty(const char* name) {
  auto v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

/// "a directory", "a named pipe (FIFO)"...: what a file that is not a regular
/// file is, for error messages.
std::string_view file_kind(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a named pipe (FIFO)";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  return "not a regular file";
}

std::string trim(std::string s) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && blank(s.back()))
    s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && blank(s[i]))
    ++i;
  return s.substr(i);
}

} // namespace

std::string home_dir() {
  if (auto h = env_or_empty("HOME"); !h.empty())
    return h;
  if (auto pw = getpwuid(getuid()); pw && pw->pw_dir)
    return pw->pw_dir;
  return {};
}

std::optional<std::string> read_first_line(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return std::nullopt;
  std::string line;
  std::getline(in, line);
  return trim(std::move(line));
}

bus::result<std::string> config_dir() {
  if (auto d = env_or_empty("CQ_CONFIG_DIR"); !d.empty())
    return d;
  auto home = home_dir();
  if (home.empty())
    return bus::error_info{errc::internal, "cannot find the config dir: set CQ_CONFIG_DIR or HOME"};
  return home + "/.config/cq";
}

std::string token_path(const std::string& config_dir) {
  return config_dir + "/token";
}

std::string local_record(const std::string& socket_path, const std::string& endpoint) {
  return std::string(bus::local_wire::scheme) + socket_path + "\n" + endpoint + "\n";
}

bus::result<cli_config> load_config() {
  auto dir = config_dir();
  if (!dir)
    return dir.error();
  cli_config cfg;
  cfg.config_dir = *dir;
  if (auto url = env_or_empty("CQ_URL"); !url.empty()) {
    cfg.endpoint = url;
    cfg.endpoint_from = "comes from CQ_URL";
  } else {
    if (auto line = read_first_line(cfg.config_dir + "/url"); line && !line->empty()) {
      cfg.endpoint = *line;
      cfg.endpoint_from = "comes from " + cfg.config_dir + "/url";
    } else {
      cfg.endpoint = default_endpoint;
      cfg.endpoint_from = "is the default (cq login writes " + cfg.config_dir + "/url)";
    }
    if (std::ifstream in(cfg.config_dir + "/local"); in) {
      std::string local, stands_for;
      std::getline(in, local);
      std::getline(in, stands_for);
      local = trim(std::move(local));
      // `ipc://` is how earlier versions named the same socket; the client
      // speaks ZeroMQ to it only where an older coordinator does.
      std::string path;
      if (local.starts_with("unix:///"))
        path = local.substr(bus::local_wire::scheme.size());
      else if (local.starts_with("ipc:///"))
        path = local.substr(std::string_view("ipc://").size());
      if (!path.empty() && trim(std::move(stands_for)) == cfg.endpoint)
        cfg.local_endpoint = std::string(bus::local_wire::scheme) + path;
    }
  }
  if (auto k = env_or_empty("CQ_SERVER_KEY"); !k.empty())
    cfg.server_key = k;
  else if (auto line = read_first_line(cfg.config_dir + "/server.key"); line)
    cfg.server_key = *line;
  if (!cfg.server_key.empty() && !bus::is_z85_key(cfg.server_key))
    return bus::error_info{errc::invalid_argument,
                           "the coordinator's server key (CQ_SERVER_KEY or server.key) is not a "
                           "CURVE public key of 40 Z85 characters"};
  if (auto t = env_or_empty("CQ_TIMEOUT_MS"); !t.empty()) {
    long long ms = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), ms);
    if (ec != std::errc() || end != t.data() + t.size() || ms <= 0)
      return bus::error_info{errc::invalid_argument,
                             fmt::format("CQ_TIMEOUT_MS '{}' is not a positive integer", t)};
    cfg.timeout = std::chrono::milliseconds(ms);
  }
  return cfg;
}

bus::result<std::string> read_token(const std::string& config_dir) {
  auto path = token_path(config_dir);
  auto refused = [&](const struct stat& st) -> std::optional<bus::error_info> {
    if (!S_ISREG(st.st_mode))
      return bus::error_info{errc::permission_denied, fmt::format("{} is {}, not a token file",
                                                                  path, file_kind(st.st_mode))};
    if ((st.st_mode & 077) != 0)
      return bus::error_info{
          errc::permission_denied,
          fmt::format("token file {} is open to group or others (mode {:04o}); a token is a "
                      "password: run `chmod 600 {}`",
                      path, st.st_mode & 07777, path)};
    return std::nullopt;
  };
  // stat() first: it neither opens nor blocks, whatever the path names.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    auto why = errno == ENOENT ? std::string("no token file") : std::string(std::strerror(errno));
    return bus::error_info{errc::unauthenticated,
                           fmt::format("{} at {} (run `cq up` on the coordinator's machine, or "
                                       "`cq login HOST:PORT TOKEN` with a token the owner gave "
                                       "you)",
                                       why, path)};
  }
  if (auto e = refused(st))
    return *e;
  // O_NONBLOCK: should the path be swapped for a FIFO after the stat, open()
  // returns at once instead of waiting for a writer; fstat() then sees it.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return bus::error_info{errc::unauthenticated, fmt::format("cannot read token file {}: {}", path,
                                                              std::strerror(errno))};
  struct fd_closer {
    int fd;
    ~fd_closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0)
    return bus::error_info{errc::unauthenticated, fmt::format("cannot read token file {}: {}", path,
                                                              std::strerror(errno))};
  if (auto e = refused(st))
    return *e;
  // One byte more than the limit tells a too-long first line from one that fits.
  std::string text(max_token_file_bytes + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    auto n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return bus::error_info{errc::unauthenticated, fmt::format("cannot read token file {}: {}",
                                                                path, std::strerror(errno))};
    if (n == 0)
      break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  auto nl = text.find('\n');
  if (nl == std::string::npos && got > max_token_file_bytes)
    return bus::error_info{errc::unauthenticated,
                           fmt::format("token file {} has no line break in its first {} bytes; "
                                       "it is not a token file",
                                       path, max_token_file_bytes)};
  auto line = trim(text.substr(0, nl));
  if (line.empty())
    return bus::error_info{errc::unauthenticated, fmt::format("token file {} is empty", path)};
  return line;
}

} // namespace cq::cli
