#include "cq/node/meminfo.hpp"
#include "cq/node/files.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
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

std::optional<mem_info> apply_capacity(std::optional<mem_info> measured,
                                       std::optional<std::uint64_t> total_override,
                                       std::optional<std::uint64_t> available_override) {
  if (total_override && available_override)
    return mem_info{*total_override, *available_override};
  if (!measured)
    return std::nullopt;
  mem_info m = *measured;
  if (total_override) {
    m.total_bytes = *total_override;
    m.available_bytes = std::min(m.available_bytes, m.total_bytes);
  }
  if (available_override)
    m.available_bytes = *available_override;
  return m;
}

std::optional<proc_stat> parse_proc_stat(std::string_view text) {
  // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so
  // the fields start after the last ')'.
  auto close = text.rfind(')');
  if (close == std::string_view::npos)
    return std::nullopt;
  auto rest = text.substr(close + 1);
  proc_stat st;
  // Tokens after ')': 0 = state (field 3), so field n is token n - 3.
  for (int i = 0; i <= 21; ++i) {
    auto tok = next_token(rest);
    if (tok.empty())
      return std::nullopt;
    if (i == 2 && !parse_num(tok, st.pgrp))
      return std::nullopt;
    if (i == 21) {
      // rss is signed in the kernel's format; a negative value never happens
      // for a live process, but is read as 0 rather than as garbage.
      std::int64_t rss = 0;
      if (!parse_num(tok, rss))
        return std::nullopt;
      st.rss_pages = rss > 0 ? static_cast<std::uint64_t>(rss) : 0;
    }
  }
  return st;
}

void sample_group_rss(std::span<group_rss> groups) {
  for (auto& g : groups)
    g.rss_bytes = 0;
  if (groups.empty())
    return;
  static const auto page = static_cast<std::uint64_t>(std::max(1L, ::sysconf(_SC_PAGESIZE)));
  DIR* dir = ::opendir("/proc");
  if (!dir)
    return;
  int dfd = ::dirfd(dir);
  char path[64];
  char buf[1024];
  while (auto* e = ::readdir(dir)) {
    const char* name = e->d_name;
    if (name[0] < '1' || name[0] > '9')
      continue; // not a process
    auto n = fmt::format_to_n(path, sizeof path - 1, "{}/stat", name);
    *n.out = '\0';
    int fd = ::openat(dfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue; // exited meanwhile
    auto len = ::read(fd, buf, sizeof buf);
    ::close(fd);
    if (len <= 0)
      continue;
    auto st = parse_proc_stat(std::string_view(buf, static_cast<std::size_t>(len)));
    if (!st)
      continue;
    for (auto& g : groups)
      if (g.pgid == st->pgrp)
        g.rss_bytes += st->rss_pages * page;
  }
  ::closedir(dir);
}

std::uint64_t cpu_count() {
  auto n = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (n > 0)
    return static_cast<std::uint64_t>(n);
  auto h = std::thread::hardware_concurrency();
  return h > 0 ? h : 1;
}

} // namespace cq::node
