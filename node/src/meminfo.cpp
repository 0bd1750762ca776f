#include "cq/node/meminfo.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <thread>

namespace cq::node {

namespace {

// Value in bytes of a line "Key:   1234 kB", or nullopt.
std::optional<std::uint64_t> parse_kb(std::string_view rest) {
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
    rest.remove_prefix(1);
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  if (ec != std::errc{} || p == rest.data())
    return std::nullopt;
  std::string_view unit(p, static_cast<std::size_t>(rest.data() + rest.size() - p));
  while (!unit.empty() && unit.front() == ' ')
    unit.remove_prefix(1);
  if (unit.starts_with("kB")) {
    if (v > UINT64_MAX / 1024)
      return std::nullopt;
    return v * 1024;
  }
  return v;
}

} // namespace

std::optional<mem_info> parse_meminfo(std::string_view text) {
  std::optional<std::uint64_t> total, available;
  while (!text.empty()) {
    auto eol = text.find('\n');
    auto line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    if (line.starts_with("MemTotal:"))
      total = parse_kb(line.substr(9));
    else if (line.starts_with("MemAvailable:"))
      available = parse_kb(line.substr(13));
  }
  if (!total || !available)
    return std::nullopt;
  return mem_info{*total, *available};
}

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

std::uint64_t cpu_count() {
  auto n = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (n > 0)
    return static_cast<std::uint64_t>(n);
  auto h = std::thread::hardware_concurrency();
  return h > 0 ? h : 1;
}

} // namespace cq::node
