#include "adapters/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cq::coord {

std::string replace_file(const std::string& path, const std::string& data, unsigned mode) {
  auto tmp = path + ".tmp";
  auto failed = [&](const char* what) {
    return std::string(what) + " " + tmp + ": " + std::strerror(errno);
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    return failed("cannot create");
  std::size_t off = 0;
  while (off < data.size()) {
    auto n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      auto e = failed("cannot write");
      ::close(fd);
      return e;
    }
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    auto e = failed("cannot sync");
    ::close(fd);
    return e;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return std::string("cannot replace ") + path + ": " + std::strerror(errno);
  return {};
}

} // namespace cq::coord
