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
