// files.hpp's writers on the machine's file system: durable whole-file
// replacement, appends and directory creation. They live with the adapters
// (cq_node_lib), so the actors' library cannot call them: the actors reach
// the disk through node_disk (seams.hpp), whose production form (disk.cpp)
// is built on these, and cq-node's startup writes node.toml with them.
#include "cq/node/files.hpp"
#include "node/adapters/files.hpp"
#include "node/adapters/sync_crew.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>

namespace cq::node {

namespace {

bus::error_info sys_error(std::string_view what, const std::filesystem::path& file, int err) {
  return {errc::internal, fmt::format("{} {}: {}", what, file.string(), std::strerror(err))};
}

// Writes all of `data` to `fd`, retrying short writes and EINTR.
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    auto n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

/// fsync of `path`, opened read-only with `flags` (O_DIRECTORY for a
/// directory); `what` names it in an error ("directory ").
status sync_path(const std::filesystem::path& path, int flags, std::string_view what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | flags);
  if (fd < 0) {
    int err = errno;
    return sys_error(fmt::format("cannot open {}", what), path, err);
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    return sys_error(fmt::format("cannot fsync {}", what), path, err);
  return done{};
}

/// fsync of `file`'s directory.
status sync_parent(const std::filesystem::path& file) {
  auto dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  return sync_path(dir, O_DIRECTORY, "directory");
}

/// Creates `file` with `flags` (O_TRUNC or O_EXCL), writes `data` and, with
/// `sync`, fsyncs it; on a failure the file is removed.
status create_file(const std::filesystem::path& file, int flags, std::string_view data,
                   unsigned mode, bool sync = true) {
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, mode);
  if (fd < 0)
    return sys_error("cannot create", file, errno);
  if (!write_all(fd, data) || (sync && ::fsync(fd) != 0)) {
    int err = errno;
    ::close(fd);
    ::unlink(file.c_str());
    return sys_error("cannot write", file, err);
  }
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(file.c_str());
    return sys_error("cannot write", file, err);
  }
  return done{};
}

} // namespace

namespace {

/// At most this many files of a group are open at once: a group is written
/// in parts of this size (a node started with 1,024 descriptors may end
/// hundreds of allocations together).
constexpr std::size_t group_part = 64;

/// Runs `tasks` on `crew`, or one after another without one.
void run_all(sync_crew* crew, std::vector<std::function<void()>>& tasks) {
  if (crew)
    crew->run(tasks);
  else
    for (auto& t : tasks)
      t();
}

/// write_files_atomic for writes [from, to), whose files are all different.
void write_part(const std::vector<file_write>& writes, std::size_t from, std::size_t to,
                std::vector<status>& out, sync_crew* crew) {
  std::vector<std::filesystem::path> tmps;
  std::vector<int> fds(to - from, -1);
  tmps.reserve(to - from);
  auto fail = [&](std::size_t k, std::string_view what, const std::filesystem::path& named,
                  int err) {
    if (fds[k] >= 0)
      ::close(std::exchange(fds[k], -1));
    ::unlink(tmps[k].c_str());
    out[from + k] = sys_error(what, named, err);
  };
  // Every file written first, none synced yet.
  for (std::size_t k = 0; k < to - from; ++k) {
    auto& w = writes[from + k];
    tmps.push_back(w.file);
    tmps.back() += ".tmp";
    fds[k] = ::open(tmps[k].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    static_cast<mode_t>(w.mode));
    if (fds[k] < 0)
      out[from + k] = sys_error("cannot create", tmps[k], errno);
    else if (!write_all(fds[k], w.data))
      fail(k, "cannot write", tmps[k], errno);
  }
  // Then each synced (side by side on a crew, ADR 0077): on a journaling
  // file system the first commits them all.
  std::vector<int> sync_err(to - from, 0);
  std::vector<std::function<void()>> tasks;
  for (std::size_t k = 0; k < to - from; ++k)
    if (fds[k] >= 0)
      tasks.emplace_back([&, k] { sync_err[k] = ::fsync(fds[k]) == 0 ? 0 : errno; });
  run_all(crew, tasks);
  for (std::size_t k = 0; k < to - from; ++k) {
    if (fds[k] < 0)
      continue;
    if (sync_err[k] != 0) {
      fail(k, "cannot write", tmps[k], sync_err[k]);
      continue;
    }
    if (::close(std::exchange(fds[k], -1)) != 0)
      fail(k, "cannot write", tmps[k], errno);
  }
  // Then renamed, and each directory synced once, after all of its renames.
  std::vector<std::filesystem::path> dirs;
  for (std::size_t k = 0; k < to - from; ++k) {
    auto& w = writes[from + k];
    if (!out[from + k])
      continue;
    if (::rename(tmps[k].c_str(), w.file.c_str()) != 0) {
      fail(k, "cannot rename into", w.file, errno);
      continue;
    }
    auto dir = w.file.parent_path();
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end())
      dirs.push_back(std::move(dir));
  }
  std::vector<status> dir_synced(dirs.size(), done{});
  tasks.clear();
  for (std::size_t d = 0; d < dirs.size(); ++d)
    tasks.emplace_back([&, d] { dir_synced[d] = sync_parent(dirs[d] / "."); }); // `dir` itself
  run_all(crew, tasks);
  for (std::size_t d = 0; d < dirs.size(); ++d) {
    auto& dir = dirs[d];
    auto& synced = dir_synced[d];
    if (synced)
      continue;
    // The renames into it may not survive a power loss: none of them is
    // reported written.
    for (std::size_t i = from; i < to; ++i)
      if (out[i] && writes[i].file.parent_path() == dir)
        out[i] = synced;
  }
}

} // namespace

std::vector<status> write_files_atomic(const std::vector<file_write>& writes, sync_crew* crew) {
  std::vector<status> out(writes.size(), done{});
  // In parts of at most group_part files, a part ending before a file it
  // already holds (two writes of one file would share its temporary file).
  for (std::size_t from = 0; from < writes.size();) {
    auto to = from + 1;
    while (to < writes.size() && to - from < group_part &&
           std::none_of(writes.begin() + static_cast<std::ptrdiff_t>(from),
                        writes.begin() + static_cast<std::ptrdiff_t>(to),
                        [&](const file_write& w) { return w.file == writes[to].file; }))
      ++to;
    write_part(writes, from, to, out, crew);
    from = to;
  }
  return out;
}

status write_file_atomic(const std::filesystem::path& file, std::string_view data, unsigned mode) {
  // A group of one: the temporary file written and synced, renamed, and its
  // directory synced.
  return std::move(write_files_atomic({{file, std::string(data), mode}}).front());
}

status write_file_once(const std::filesystem::path& file, std::string_view data, unsigned mode) {
  if (auto st = create_file(file, O_EXCL, data, mode); !st)
    return st;
  // Its entry is durable once the directory is (already committed with the
  // file on a journaling file system).
  return sync_parent(file);
}

status write_file_new(const std::filesystem::path& file, std::string_view data, unsigned mode) {
  return create_file(file, O_EXCL, data, mode, false);
}

status sync_file(const std::filesystem::path& file) {
  return sync_path(file, 0, "file");
}

namespace {

/// Opens `file` with `flags` (made with `mode` if missing) and writes all of
/// `data`; `verb` says what a failed write was ("cannot append to").
status write_opened(const std::filesystem::path& file, std::string_view data, int flags,
                    unsigned mode, std::string_view verb) {
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, mode);
  if (fd < 0)
    return sys_error("cannot open", file, errno);
  bool ok = write_all(fd, data);
  int err = errno;
  ::close(fd);
  if (!ok)
    return sys_error(verb, file, err);
  return done{};
}

} // namespace

status replace_file(const std::filesystem::path& file, std::string_view data, unsigned mode) {
  return write_opened(file, data, O_TRUNC, mode, "cannot write");
}

status append_to_file(const std::filesystem::path& file, std::string_view text) {
  return write_opened(file, text, O_APPEND, 0640, "cannot append to");
}

namespace {

/// mkdir of `dir`, its missing parents made first; each directory made is
/// appended to `created`, parents before children. The common case, a
/// missing directory in one that exists, costs one mkdir (no stat of each
/// level first, as std::filesystem::create_directories makes).
int mkdir_parents(const std::filesystem::path& dir, std::vector<std::filesystem::path>& created) {
  if (::mkdir(dir.c_str(), 0777) == 0) {
    created.push_back(dir);
    return 0;
  }
  int err = errno;
  if (err == ENOENT) {
    auto parent = dir.parent_path();
    if (parent.empty() || parent == dir)
      return err;
    if (int perr = mkdir_parents(parent, created); perr != 0)
      return perr;
    if (::mkdir(dir.c_str(), 0777) == 0) {
      created.push_back(dir);
      return 0;
    }
    err = errno;
  }
  if (err != EEXIST)
    return err;
  // There already (or made by someone else meanwhile): a directory, or a
  // file in the way.
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

} // namespace

status make_dirs(const std::filesystem::path& dir, std::vector<std::filesystem::path>* created) {
  std::vector<std::filesystem::path> unlisted;
  if (int err = mkdir_parents(dir, created ? *created : unlisted); err != 0)
    return bus::error_info{errc::internal, fmt::format("cannot create directory {}: {}",
                                                       dir.string(), std::strerror(err))};
  return done{};
}

std::optional<std::string> read_file_bounded(const std::filesystem::path& file, std::size_t max) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::nullopt;
  std::string out;
  char buf[4096];
  for (;;) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() >= max)
      break;
  }
  ::close(fd);
  return out;
}

} // namespace cq::node
