#include "node/adapters/linux/cgroups.hpp"
#include "cq/node/files.hpp"
#include "cq/node/memcap.hpp"
#include "node/adapters/files.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace cq::node {

namespace fs = std::filesystem;

namespace {

/// Writes `value` to a control file. O_CREAT only matters for a fake tree (a
/// real cgroup directory has every file it supports; creating others fails).
bool write_control(const fs::path& p, std::string_view value, int* err = nullptr) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (err)
      *err = errno;
    return false;
  }
  auto n = ::write(fd, value.data(), value.size());
  int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    if (err)
      *err = n < 0 ? e : EIO;
    return false;
  }
  return true;
}

bool path_exists(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

/// True if the whitespace-separated list `text` holds `word`.
bool has_word(std::string_view text, std::string_view word) {
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t'))
      ++i;
    auto j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\n' && text[j] != '\t')
      ++j;
    if (text.substr(i, j - i) == word)
      return true;
    i = j;
  }
  return false;
}

/// The node's own group in /proc/self/cgroup: v2 ("0::/path") or the v1 line
/// whose controllers include memory. nullopt when absent.
std::optional<std::string> own_group(std::string_view self_cgroup, bool v2) {
  while (!self_cgroup.empty()) {
    auto line = next_line(self_cgroup);
    auto c1 = line.find(':');
    if (c1 == std::string_view::npos)
      continue;
    auto c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos)
      continue;
    auto ctrls = line.substr(c1 + 1, c2 - c1 - 1);
    auto path = std::string(line.substr(c2 + 1));
    if (v2 && line.substr(0, c1) == "0" && ctrls.empty())
      return path;
    if (!v2) {
      std::string list(ctrls);
      for (auto& ch : list)
        if (ch == ',')
          ch = ' ';
      if (has_word(list, "memory"))
        return path;
    }
  }
  return std::nullopt;
}

fs::path below(const fs::path& root, const std::string& rel) {
  auto r = rel;
  while (!r.empty() && r.front() == '/')
    r.erase(0, 1);
  return r.empty() ? root : root / r;
}

/// Why v2 is not usable, or "" when it is (parent set).
std::string try_v2(const memory_config& cfg, std::string_view self_cgroup, fs::path& parent) {
  fs::path root = cfg.cgroup_root;
  fs::path v2root;
  if (path_exists(root / "cgroup.controllers"))
    v2root = root;
  else if (path_exists(root / "unified" / "cgroup.controllers"))
    v2root = root / "unified";
  else
    return fmt::format("no cgroup v2 hierarchy under {}", root.string());
  if (cfg.cgroup_parent) {
    parent = *cfg.cgroup_parent;
  } else {
    auto own = own_group(self_cgroup, true);
    if (!own)
      return "the node's own cgroup v2 group is unknown (/proc/self/cgroup)";
    parent = below(v2root, *own);
  }
  auto ctrls = read_file_bounded(parent / "cgroup.controllers");
  if (!ctrls || !has_word(*ctrls, "memory"))
    return fmt::format("the memory controller is not available in {}", parent.string());
  auto sub = read_file_bounded(parent / "cgroup.subtree_control");
  if (!sub || !has_word(*sub, "memory")) {
    int err = 0;
    bool ok = write_control(parent / "cgroup.subtree_control", "+memory", &err);
    if (!ok && err == EBUSY && !cfg.cgroup_parent) {
      // "No internal processes": a group that holds processes (this node) cannot
      // hand controllers to children. Move the node into a leaf of its own
      // group first, as delegated services do, then enable memory for children.
      auto leaf = parent / "cq-node";
      if ((::mkdir(leaf.c_str(), 0755) == 0 || errno == EEXIST) &&
          write_control(leaf / "cgroup.procs", std::to_string(::getpid()), &err))
        ok = write_control(parent / "cgroup.subtree_control", "+memory", &err);
    }
    if (!ok)
      return fmt::format("cannot enable the memory controller for children of {}: {}",
                         parent.string(), std::strerror(err));
    sub = read_file_bounded(parent / "cgroup.subtree_control");
    if (!sub || (!has_word(*sub, "memory") && !has_word(*sub, "+memory")))
      return fmt::format("the memory controller is not delegated below {}", parent.string());
  }
  if (::access(parent.c_str(), W_OK) != 0)
    return fmt::format("{} is not writable", parent.string());
  return {};
}

std::string try_v1(const memory_config& cfg, std::string_view self_cgroup, fs::path& parent) {
  fs::path v1root = fs::path(cfg.cgroup_root) / "memory";
  if (!path_exists(v1root / "memory.limit_in_bytes"))
    return fmt::format("no cgroup v1 memory controller at {}", v1root.string());
  if (cfg.cgroup_parent) {
    parent = *cfg.cgroup_parent;
  } else {
    auto own = own_group(self_cgroup, false);
    if (!own)
      return "the node's own v1 memory group is unknown (/proc/self/cgroup)";
    parent = below(v1root, *own);
  }
  if (!path_exists(parent / "memory.limit_in_bytes"))
    return fmt::format("{} is not a v1 memory group", parent.string());
  if (::access(parent.c_str(), W_OK) != 0)
    return fmt::format("{} is not writable", parent.string());
  return {};
}

std::optional<std::uint64_t> read_u64(const fs::path& p) {
  auto t = read_file_bounded(p);
  if (!t)
    return std::nullopt;
  std::string_view s = *t;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.remove_suffix(1);
  std::uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || ptr != s.data() + s.size() || s.empty())
    return std::nullopt;
  return v;
}

} // namespace

bus::result<memcap_setup> detect_memcap(const memory_config& cfg, std::string_view self_cgroup) {
  memcap_setup out;
  if (cfg.mode == "watchdog")
    return out;
  fs::path parent;
  if (cfg.mode == "cgroup_v2" || cfg.mode == "auto") {
    auto why = try_v2(cfg, self_cgroup, parent);
    if (why.empty())
      return memcap_setup{memcap_mode::cgroup_v2, parent, ""};
    if (cfg.mode == "cgroup_v2")
      return bus::error_info{errc::invalid_argument, "[memory] mode cgroup_v2: " + why};
    out.note = why;
  }
  if (cfg.mode == "cgroup_v1" || cfg.mode == "auto") {
    auto why = try_v1(cfg, self_cgroup, parent);
    if (why.empty())
      return memcap_setup{memcap_mode::cgroup_v1, parent, ""};
    if (cfg.mode == "cgroup_v1")
      return bus::error_info{errc::invalid_argument, "[memory] mode cgroup_v1: " + why};
    out.note += (out.note.empty() ? "" : "; ") + why;
  }
  if (cfg.mode != "auto")
    return bus::error_info{errc::invalid_argument,
                           fmt::format("[memory] mode '{}' is not one of auto, cgroup_v2, "
                                       "cgroup_v1, watchdog",
                                       cfg.mode)};
  return out;
}

bus::result<mem_group> create_group(const memcap_setup& setup, const std::string& allocation,
                                    std::optional<std::uint64_t> cap_bytes) {
  mem_group g{setup.mode, {}};
  if (setup.mode == memcap_mode::watchdog)
    return g;
  if (!is_valid_id(allocation))
    return bus::error_info{errc::invalid_argument, "allocation: not a valid id"};
  g.dir = setup.parent / group_name(setup, allocation);
  if (::mkdir(g.dir.c_str(), 0755) != 0 && errno != EEXIST)
    return bus::error_info{errc::internal, fmt::format("cannot create cgroup {}: {}",
                                                       g.dir.string(), std::strerror(errno))};
  if (!cap_bytes)
    return g; // no limit: the kernel's default ("max") stays
  if (auto w = write_limits(setup, g.dir, *cap_bytes); !w) {
    ::rmdir(g.dir.c_str());
    return w.error();
  }
  return g;
}

status write_limits(const memcap_setup& setup, const fs::path& dir, std::uint64_t cap_bytes) {
  auto cap = std::to_string(cap_bytes);
  auto fail = [&](std::string_view file, int err) -> status {
    return bus::error_info{errc::internal, fmt::format("cannot write {}/{}: {}", dir.string(), file,
                                                       std::strerror(err))};
  };
  int err = 0;
  if (setup.mode == memcap_mode::cgroup_v2) {
    if (!write_control(dir / "memory.max", cap, &err))
      return fail("memory.max", err);
    // Without swap accounting the file is missing: there is no swap to limit.
    if (path_exists(dir / "memory.swap.max") && !write_control(dir / "memory.swap.max", "0", &err))
      return fail("memory.swap.max", err);
    if (!write_control(dir / "memory.oom.group", "1", &err))
      return fail("memory.oom.group", err);
  } else {
    if (!write_control(dir / "memory.limit_in_bytes", cap, &err))
      return fail("memory.limit_in_bytes", err);
    // memsw (memory + swap) must be >= limit_in_bytes: written second.
    if (path_exists(dir / "memory.memsw.limit_in_bytes") &&
        !write_control(dir / "memory.memsw.limit_in_bytes", cap, &err))
      return fail("memory.memsw.limit_in_bytes", err);
  }
  return done{};
}

std::optional<std::vector<pid_t>> group_pids(const mem_group& g) {
  if (g.mode == memcap_mode::watchdog || g.dir.empty())
    return std::vector<pid_t>{};
  auto text = read_file_bounded(g.dir / "cgroup.procs", 4 << 20);
  if (!text)
    return std::nullopt;
  std::vector<pid_t> out;
  std::string_view rest = *text;
  while (!rest.empty()) {
    auto line = trim(next_line(rest));
    pid_t pid = 0;
    if (!line.empty() && parse_num(line, pid) && pid > 0)
      out.push_back(pid);
  }
  return out;
}

int open_procs_file(const mem_group& g) {
  if (g.dir.empty()) {
    errno = EINVAL;
    return -1;
  }
  return ::open((g.dir / "cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
}

int open_group_dir(const mem_group& g) {
  if (g.dir.empty()) {
    errno = EINVAL;
    return -1;
  }
  return ::open(g.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

std::optional<std::uint64_t> oom_kills(const mem_group& g) {
  if (g.mode == memcap_mode::watchdog)
    return std::nullopt;
  bool v1 = g.mode == memcap_mode::cgroup_v1;
  auto t = read_file_bounded(g.dir / (v1 ? "memory.oom_control" : "memory.events"));
  if (!t)
    return std::nullopt;
  return parse_oom_kill(*t, v1);
}

std::optional<std::uint64_t> peak_usage(const mem_group& g) {
  if (g.mode == memcap_mode::watchdog)
    return std::nullopt;
  return read_u64(g.dir /
                  (g.mode == memcap_mode::cgroup_v1 ? "memory.max_usage_in_bytes" : "memory.peak"));
}

std::optional<std::uint64_t> current_usage(const mem_group& g) {
  if (g.mode == memcap_mode::watchdog)
    return std::nullopt;
  return read_u64(g.dir /
                  (g.mode == memcap_mode::cgroup_v1 ? "memory.usage_in_bytes" : "memory.current"));
}

status remove_group(const mem_group& g) {
  if (g.mode == memcap_mode::watchdog || g.dir.empty())
    return done{};
  if (::rmdir(g.dir.c_str()) == 0 || errno == ENOENT)
    return done{};
  int err = errno;
  if (err == ENOTEMPTY) {
    // A fake tree (tests) holds regular files; a real cgroup directory never
    // reports ENOTEMPTY for its control files. Remove the files, then retry.
    std::error_code ec;
    for (auto& e : fs::directory_iterator(g.dir, ec))
      if (e.is_regular_file(ec))
        fs::remove(e.path(), ec);
    if (::rmdir(g.dir.c_str()) == 0)
      return done{};
    err = errno;
  }
  return bus::error_info{errc::internal, fmt::format("cannot remove cgroup {}: {}", g.dir.string(),
                                                     std::strerror(err))};
}

} // namespace cq::node
