#include "cq/cli/config.hpp"

#include <fmt/format.h>

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace cq::cli {

namespace {

/// The value of an environment variable, "" when unset.
std::string env_or_empty(const char* name) {
  auto v = std::getenv(name);
  return v ? std::string(v) : std::string();
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

bus::result<cli_config> load_config() {
  auto dir = config_dir();
  if (!dir)
    return dir.error();
  cli_config cfg;
  cfg.config_dir = *dir;
  if (auto url = env_or_empty("CQ_URL"); !url.empty()) {
    cfg.endpoint = url;
  } else if (auto line = read_first_line(cfg.config_dir + "/url"); line && !line->empty()) {
    cfg.endpoint = *line;
  } else {
    cfg.endpoint = default_endpoint;
  }
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
  std::ifstream in(path);
  if (!in) {
    auto why = errno == ENOENT ? std::string("no token file") : std::string(std::strerror(errno));
    return bus::error_info{errc::unauthenticated,
                           fmt::format("{} at {} (run `cq up` on the coordinator's machine, or "
                                       "ask the owner for a token)",
                                       why, path)};
  }
  std::string line;
  std::getline(in, line);
  line = trim(std::move(line));
  if (line.empty())
    return bus::error_info{errc::unauthenticated, fmt::format("token file {} is empty", path)};
  return line;
}

} // namespace cq::cli
