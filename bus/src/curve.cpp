#include "cq/bus/curve.hpp"

#include <fmt/format.h>
#include <zmq.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <thread>

namespace cq::bus {

bool is_z85_key(const std::string& key) {
  static constexpr std::string_view alphabet =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  if (key.size() != 40)
    return false;
  for (char c : key)
    if (alphabet.find(c) == std::string_view::npos)
      return false;
  return true;
}

curve_keypair new_curve_keypair() {
  std::array<char, 41> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0)
    throw std::runtime_error(fmt::format("cannot make a CURVE keypair: {} (ZeroMQ without CURVE?)",
                                         zmq_strerror(zmq_errno())));
  return {std::string(pub.data(), 40), std::string(sec.data(), 40)};
}

result<curve_keypair> load_or_create_keypair(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return error_info{errc::internal, fmt::format("{}: {}", path, std::strerror(errno))};
    curve_keypair k;
    try {
      k = new_curve_keypair();
    } catch (const std::exception& e) {
      return error_info{errc::internal, e.what()};
    }
    // Written whole under a temporary name, then linked into place: a reader
    // never sees a half-written file, and of two processes creating it at
    // once one links first and the other reads that one's key.
    auto text = k.public_key + "\n" + k.secret_key + "\n";
    auto tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(),
                           std::hash<std::thread::id>{}(std::this_thread::get_id()));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
      return error_info{errc::internal,
                        fmt::format("cannot create {}: {}", tmp, std::strerror(errno))};
    auto n = ::write(fd, text.data(), text.size());
    bool ok = n == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
    ::close(fd);
    int linked = ok ? ::link(tmp.c_str(), path.c_str()) : -1;
    int link_errno = errno;
    ::unlink(tmp.c_str());
    if (!ok)
      return error_info{errc::internal, fmt::format("cannot write {}", tmp)};
    if (linked == 0)
      return k;
    if (link_errno != EEXIST)
      return error_info{errc::internal,
                        fmt::format("cannot create {}: {}", path, std::strerror(link_errno))};
    return load_or_create_keypair(path); // another process made it first: its key
  }
  if (!S_ISREG(st.st_mode))
    return error_info{errc::invalid_argument, fmt::format("{} is not a regular file", path)};
  if ((st.st_mode & 077) != 0)
    return error_info{errc::permission_denied,
                      fmt::format("key file {} is open to group or others (mode {:04o}); it holds "
                                  "a secret key: run `chmod 600 {}`",
                                  path, st.st_mode & 07777, path)};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return error_info{errc::internal,
                      fmt::format("cannot read {}: {}", path, std::strerror(errno))};
  char buf[256];
  auto n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0)
    return error_info{errc::invalid_argument, fmt::format("{}: empty", path)};
  std::string text(buf, static_cast<std::size_t>(n));
  auto nl = text.find('\n');
  curve_keypair k;
  if (nl != std::string::npos) {
    k.public_key = text.substr(0, nl);
    auto rest = text.substr(nl + 1);
    k.secret_key = rest.substr(0, rest.find('\n'));
  }
  if (!is_z85_key(k.public_key) || !is_z85_key(k.secret_key))
    return error_info{
        errc::invalid_argument,
        fmt::format("{}: not a CURVE keypair (two lines of 40 Z85 characters)", path)};
  return k;
}

std::string format_invite(const invite_code& c) {
  if (c.endpoint.empty())
    return c.secret;
  // The key as hex: Z85 has '_' free but uses ':' and '/', which endpoints use too.
  std::string key = "-";
  if (!c.server_key.empty()) {
    key.clear();
    for (unsigned char ch : c.server_key)
      key += fmt::format("{:02x}", ch);
  }
  return fmt::format("{}_{}_{}", c.secret, key, c.endpoint);
}

result<invite_code> parse_invite(const std::string& text) {
  auto bad = [&](std::string why) {
    return error_info{errc::invalid_argument, "invite code: " + why};
  };
  if (text.rfind("cqi_", 0) != 0)
    return bad("does not start with cqi_ (copy it whole from cq node invite)");
  invite_code c;
  auto a = text.find('_', 4);
  c.secret = text.substr(0, a);
  if (a == std::string::npos)
    return c;
  auto b = text.find('_', a + 1);
  if (b == std::string::npos)
    return bad("truncated (no endpoint)");
  auto key = text.substr(a + 1, b - a - 1);
  c.endpoint = text.substr(b + 1);
  if (c.endpoint.empty())
    return bad("truncated (no endpoint)");
  if (key != "-") {
    if (key.size() != 80)
      return bad("the server key is not 80 hex digits");
    for (std::size_t i = 0; i < key.size(); i += 2) {
      unsigned v = 0;
      if (std::sscanf(key.c_str() + i, "%2x", &v) != 1)
        return bad("the server key is not hex");
      c.server_key.push_back(static_cast<char>(v));
    }
    if (!is_z85_key(c.server_key))
      return bad("the server key is not a CURVE key");
  }
  return c;
}

} // namespace cq::bus
