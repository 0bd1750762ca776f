// The node's disk (seams.hpp: node_disk) on the machine's file system, with
// files.hpp's durable writes; and the constructors of the state-dir classes
// that take the machine's disk (the tests' and tools' way to build them).
#include "node/adapters/adapters.hpp"

#include "cq/node/fault_latch.hpp"
#include "cq/node/files.hpp"
#include "cq/node/holds.hpp"
#include "cq/node/outbox.hpp"
#include "node/adapters/files.hpp"
#include "node/adapters/sync_crew.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#ifdef __linux__
#include <linux/fs.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

namespace cq::node {

namespace {

namespace fs = std::filesystem;

status sync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return bus::error_info{errc::internal, fmt::format("cannot open directory {}: {}", dir.string(),
                                                       std::strerror(errno))};
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0)
    return bus::error_info{errc::internal, fmt::format("cannot fsync directory {}: {}",
                                                       dir.string(), std::strerror(errno))};
  return done{};
}

/// Sets the "top of a directory hierarchy" inode flag on `dir` (chattr +T):
/// ext4's Orlov allocator then places each new subdirectory in a block group
/// with fewer directories and more free inodes than average, as it does for
/// directories made in the root, instead of in `dir`'s own group. On an ext4
/// without a journal every inode made skips, one by one, the inodes of its
/// group deleted in the last minutes; a node's allocations then stay out of
/// the groups where earlier deletions were (ADR 0061). False where the file
/// system keeps no such flag (tmpfs, XFS, APFS).
bool set_topdir_flag(const fs::path& dir) {
#ifdef FS_IOC_GETFLAGS
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return false;
  int flags = 0;
  bool set = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  if (set && !(flags & FS_TOPDIR_FL)) {
    flags |= FS_TOPDIR_FL;
    set = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  }
  ::close(fd);
  return set;
#else
  (void)dir;
  return false;
#endif
}

/// `dirs`' directories in order, each once; `dirs` is cleared (a sync that
/// failed is not tried again, seams.hpp).
node_disk::pending_syncs each_once(node_disk::pending_syncs& dirs) {
  node_disk::pending_syncs once;
  for (auto& dir : dirs)
    if (std::find(once.begin(), once.end(), dir) == once.end())
      once.push_back(std::move(dir));
  dirs.clear();
  return once;
}

class machine_disk final : public node_disk {
public:
  status write_atomic(const fs::path& file, std::string_view data, unsigned mode) override {
    return write_file_atomic(file, data, mode);
  }
  std::vector<status> write_atomic_all(const std::vector<file_write>& writes) override {
    return write_files_atomic(writes, &crew_);
  }
  status write_once(const fs::path& file, std::string_view data, unsigned mode) override {
    return write_file_once(file, data, mode);
  }
  status write_once_later(const fs::path& file, std::string_view data, pending_syncs& files,
                          pending_syncs& dirs, unsigned mode) override {
    if (auto st = write_file_new(file, data, mode); !st)
      return st;
    files.push_back(file);
    dirs.push_back(file.has_parent_path() ? file.parent_path() : fs::path("."));
    return done{};
  }
  status sync_files(pending_syncs& files) override {
    pending_syncs todo;
    todo.swap(files); // cleared either way (seams.hpp)
    for (auto& f : todo)
      if (auto st = sync_file(f); !st)
        return st;
    return done{};
  }
  status write_volatile(const fs::path& file, std::string_view data, unsigned mode) override {
    return replace_file(file, data, mode);
  }
  status append(const fs::path& file, std::string_view text) override {
    return append_to_file(file, text);
  }
  /// Each directory created gets its entry synced in its parent, so that a
  /// record written into it later is found after a power loss.
  status make_dirs(const fs::path& dir) override {
    pending_syncs later;
    if (auto st = make_dirs_later(dir, later); !st)
      return st;
    return sync_dirs(later);
  }
  status make_dirs_later(const fs::path& dir, pending_syncs& later) override {
    std::vector<fs::path> created;
    if (auto st = node::make_dirs(dir, &created); !st)
      return st;
    // Each new directory's entry is synced in its parent, deepest first.
    for (auto p = created.rbegin(); p != created.rend(); ++p)
      later.push_back(p->parent_path().empty() ? fs::path(".") : p->parent_path());
    return done{};
  }
  status sync_together(pending_syncs& files, pending_syncs& dirs) override {
    pending_syncs f;
    f.swap(files); // cleared either way (seams.hpp), as dirs by each_once
    auto once = each_once(dirs);
    std::vector<status> out(f.size() + once.size(), status(done{}));
    std::vector<std::function<void()>> tasks;
    tasks.reserve(out.size());
    for (std::size_t i = 0; i < f.size(); ++i)
      tasks.emplace_back([&, i] { out[i] = sync_file(f[i]); });
    for (std::size_t i = 0; i < once.size(); ++i)
      tasks.emplace_back([&, i] { out[f.size() + i] = sync_dir(once[i]); });
    crew_.run(tasks);
    for (auto& st : out) // the first failure, files before directories
      if (!st)
        return st;
    return done{};
  }
  status sync_dirs(pending_syncs& dirs) override {
    for (auto& dir : each_once(dirs))
      if (auto st = sync_dir(dir); !st)
        return st;
    return done{};
  }
  status make_dir_unsynced(const fs::path& dir) override {
    if (::mkdir(dir.c_str(), 0777) == 0)
      return done{};
    int err = errno;
    if (err == EEXIST && is_directory(dir))
      return done{};
    return bus::error_info{errc::internal, fmt::format("cannot create directory {}: {}",
                                                       dir.string(), std::strerror(err))};
  }
  std::optional<std::string> read(const fs::path& file, std::size_t max) override {
    return read_file_bounded(file, max);
  }
  bool exists(const fs::path& p) override {
    std::error_code ec;
    return fs::exists(p, ec);
  }
  bool is_directory(const fs::path& p) override {
    std::error_code ec;
    return fs::is_directory(p, ec);
  }
  std::vector<std::string> list(const fs::path& dir) override {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      names.push_back(it->path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  status rename(const fs::path& from, const fs::path& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return bus::error_info{errc::internal,
                             fmt::format("cannot rename {} to {}: {}", from.string(), to.string(),
                                         std::strerror(errno))};
    return sync_dir(to.parent_path());
  }
  bool spread_subdirs(const fs::path& dir) override { return set_topdir_flag(dir); }
  status remove_tree(const fs::path& p) override {
    std::error_code ec;
    fs::remove_all(p, ec);
    if (ec)
      return bus::error_info{errc::internal,
                             fmt::format("cannot delete {}: {}", p.string(), ec.message())};
    return done{};
  }
  status move_aside(const fs::path& from, const fs::path& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return bus::error_info{errc::internal, fmt::format("cannot move {} to {}: {}", from.string(),
                                                         to.string(), std::strerror(errno))};
    return done{};
  }
  status remove(const fs::path& p) override {
    std::error_code ec;
    if (!fs::remove(p, ec) && ec)
      return bus::error_info{errc::internal,
                             fmt::format("cannot delete {}: {}", p.string(), ec.message())};
    return done{};
  }
  bus::result<chunk> read_at(const fs::path& file, std::uint64_t offset, std::size_t max) override {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT)
        return bus::error_info{errc::not_found, fmt::format("{} does not exist", file.string())};
      return bus::error_info{
          errc::internal, fmt::format("cannot open {}: {}", file.string(), std::strerror(errno))};
    }
    struct stat sb {};
    if (::fstat(fd, &sb) != 0) {
      ::close(fd);
      return bus::error_info{errc::internal, fmt::format("cannot stat {}", file.string())};
    }
    chunk c;
    c.size = static_cast<std::uint64_t>(sb.st_size);
    std::uint64_t want = offset < c.size ? std::min<std::uint64_t>(max, c.size - offset) : 0;
    c.data.resize(want);
    std::size_t got = 0;
    while (got < want) {
      auto n = ::pread(fd, c.data.data() + got, want - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
    c.data.resize(got);
    return c;
  }

private:
  sync_crew crew_{3}; ///< sync_together's helpers: a start's five fsyncs at once
};

} // namespace

node_disk& machine_disk_instance() {
  static machine_disk disk;
  return disk;
}

bus::result<outbox> outbox::open(const std::filesystem::path& dir) {
  return open(machine_disk_instance(), dir);
}

hold_store::hold_store(std::filesystem::path file)
    : hold_store(machine_disk_instance(), std::move(file)) {}

fault_latch::fault_latch(std::filesystem::path state_dir)
    : fault_latch(machine_disk_instance(), std::move(state_dir)) {}

} // namespace cq::node
