// files.hpp's writers on the machine's file system: durable whole-file
// replacement, appends and directory creation. They live with the adapters
// (cq_node_lib), so the actors' library cannot call them: the actors reach
// the disk through node_disk (seams.hpp), whose production form (disk.cpp)
// is built on these, and cq-node's startup writes node.toml with them.
#include "cq/node/files.hpp"
#include "node/adapters/files.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

/// fsync of `file`'s directory.
status sync_parent(const std::filesystem::path& file) {
  auto dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return sys_error("cannot open directory", dir, errno);
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  if (rc != 0)
    return sys_error("cannot fsync directory", dir, err);
  return done{};
}

/// Creates `file` with `flags` (O_TRUNC or O_EXCL), writes `data` and fsyncs
/// it; on a failure the file is removed.
status create_synced(const std::filesystem::path& file, int flags, std::string_view data,
                     unsigned mode) {
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, mode);
  if (fd < 0)
    return sys_error("cannot create", file, errno);
  if (!write_all(fd, data) || ::fsync(fd) != 0) {
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

status write_file_atomic(const std::filesystem::path& file, std::string_view data, unsigned mode) {
  auto tmp = file;
  tmp += ".tmp";
  if (auto st = create_synced(tmp, O_TRUNC, data, mode); !st)
    return st;
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return sys_error("cannot rename into", file, err);
  }
  // The rename is durable only once the directory entry is.
  return sync_parent(file);
}

std::vector<status> write_files_atomic(const std::vector<file_write>& writes) {
  std::vector<status> out(writes.size(), done{});
  std::vector<std::filesystem::path> tmps;
  std::vector<int> fds(writes.size(), -1);
  tmps.reserve(writes.size());
  auto fail = [&](std::size_t i, std::string_view what, const std::filesystem::path& named,
                  int err) {
    if (fds[i] >= 0)
      ::close(std::exchange(fds[i], -1));
    ::unlink(tmps[i].c_str());
    out[i] = sys_error(what, named, err);
  };
  // Every file written first, none synced yet.
  for (std::size_t i = 0; i < writes.size(); ++i) {
    tmps.push_back(writes[i].file);
    tmps.back() += ".tmp";
    fds[i] = ::open(tmps[i].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    static_cast<mode_t>(writes[i].mode));
    if (fds[i] < 0)
      out[i] = sys_error("cannot create", tmps[i], errno);
    else if (!write_all(fds[i], writes[i].data))
      fail(i, "cannot write", tmps[i], errno);
  }
  // Then each synced: on a journaling file system the first commits them all.
  for (std::size_t i = 0; i < writes.size(); ++i) {
    if (fds[i] < 0)
      continue;
    if (::fsync(fds[i]) != 0) {
      fail(i, "cannot write", tmps[i], errno);
      continue;
    }
    if (::close(std::exchange(fds[i], -1)) != 0)
      fail(i, "cannot write", tmps[i], errno);
  }
  // Then renamed, and each directory synced once, after all of its renames.
  std::vector<std::filesystem::path> dirs;
  for (std::size_t i = 0; i < writes.size(); ++i) {
    if (!out[i])
      continue;
    if (::rename(tmps[i].c_str(), writes[i].file.c_str()) != 0) {
      fail(i, "cannot rename into", writes[i].file, errno);
      continue;
    }
    auto dir = writes[i].file.parent_path();
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end())
      dirs.push_back(std::move(dir));
  }
  for (auto& dir : dirs) {
    auto synced = sync_parent(dir / "."); // `dir` itself
    if (synced)
      continue;
    // The renames into it may not survive a power loss: none of them is
    // reported written.
    for (std::size_t i = 0; i < writes.size(); ++i)
      if (out[i] && writes[i].file.parent_path() == dir)
        out[i] = synced;
  }
  return out;
}

status write_file_once(const std::filesystem::path& file, std::string_view data, unsigned mode) {
  if (auto st = create_synced(file, O_EXCL, data, mode); !st)
    return st;
  // Its entry is durable once the directory is (already committed with the
  // file on a journaling file system).
  return sync_parent(file);
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

status make_dirs(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return bus::error_info{
        errc::internal, fmt::format("cannot create directory {}: {}", dir.string(), ec.message())};
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
