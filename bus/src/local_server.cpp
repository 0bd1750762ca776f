#include "local_server.hpp"

#include "cq/bus/codec.hpp"
#include "cq/bus/local_wire.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace cq::bus {

namespace {

std::int64_t mono_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

sockaddr_un address_of(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    throw std::runtime_error(fmt::format("cannot serve on {}: the path is too long", path));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

} // namespace

local_server::local_server(dispatch_fn dispatch) : dispatch_(std::move(dispatch)) {}

local_server::~local_server() {
  for (auto& [peer, c] : conns_)
    ::close(c.fd);
  if (listen_fd_ < 0)
    return;
  ::close(listen_fd_);
  // Only our own socket: another coordinator may have taken the path since.
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_)
    ::unlink(path_.c_str());
}

void local_server::bind(const std::string& path) {
  auto addr = address_of(path);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    // Only a socket an earlier run left behind may be replaced: not a file,
    // and not one that a process still serves (cq would reach this one).
    if (!S_ISSOCK(st.st_mode))
      throw std::runtime_error(
          fmt::format("cannot serve on {}: a file that is not a socket is there", path));
    int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool served =
        probe >= 0 && ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
    if (probe >= 0)
      ::close(probe);
    if (served)
      throw std::runtime_error(
          fmt::format("cannot serve on {}: another process serves that socket", path));
    ::unlink(path.c_str());
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot serve on {}: {}", path, std::strerror(errno)));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, 128) != 0) {
    auto why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error(fmt::format("cannot serve on {}: {}", path, why));
  }
  ::chmod(path.c_str(), 0666); // tokens decide who may do what, as on loopback TCP
  if (::lstat(path.c_str(), &st) == 0)
    dev_ = st.st_dev, ino_ = st.st_ino;
  listen_fd_ = fd;
  path_ = path;
}

bool local_server::has_whole_frame(const connection& c) const {
  if (c.in.size() < local_wire::header_bytes)
    return false;
  auto len = local_wire::announced(c.in);
  return !len || c.in.size() - local_wire::header_bytes >= *len; // a bad length is taken too
}

std::size_t local_server::buffered() const {
  std::size_t n = 0;
  for (auto& [peer, c] : conns_)
    n += c.in.size() + c.out.size();
  return n;
}

bool local_server::reading(const connection& c, bool over_budget) const {
  return !c.eof && c.busy < max_in_flight && c.out.size() < (1 << 20) && !has_whole_frame(c) &&
         !(over_budget && !c.in.empty());
}

std::chrono::milliseconds local_server::add_poll_items(std::vector<zmq::pollitem_t>& items,
                                                       std::chrono::milliseconds wait) {
  polled_.clear();
  auto now = mono_ms();
  bool accepting = listen_fd_ >= 0 && now >= accept_after_ms_;
  items.push_back(
      {nullptr, accepting ? listen_fd_ : -1, static_cast<short>(accepting ? ZMQ_POLLIN : 0), 0});
  bool over_budget = buffered() > max_buffered_bytes;
  for (auto& [peer, c] : conns_) {
    if (has_whole_frame(c))
      wait = std::chrono::milliseconds(0); // its turn comes on this wake-up
    // Backpressure: a peer with much in flight, unread or not yet taken is
    // not read until that drains (its own writes then wait).
    auto events = static_cast<short>(reading(c, over_budget) ? ZMQ_POLLIN : 0);
    if (!c.out.empty())
      events |= ZMQ_POLLOUT;
    items.push_back({nullptr, c.fd, events, 0});
    polled_.push_back(peer);
  }
  return wait;
}

void local_server::after_poll(const std::vector<zmq::pollitem_t>& items, std::size_t first) {
  auto now = mono_ms();
  if (items[first].revents & ZMQ_POLLIN)
    accept_all(now);
  for (std::size_t i = 0; i < polled_.size(); ++i) {
    auto r = items[first + 1 + i].revents;
    auto it = conns_.find(polled_[i]);
    if (it == conns_.end())
      continue;
    if (r & ZMQ_POLLOUT)
      write_some(polled_[i], now);
    it = conns_.find(polled_[i]);
    if (it != conns_.end() && (r & (ZMQ_POLLIN | ZMQ_POLLERR)))
      read_some(polled_[i], it->second, now);
  }
  // Each connection's turn: at most frames_per_wake frames each.
  std::vector<peer_id> peers;
  for (auto& [peer, c] : conns_)
    peers.push_back(peer);
  for (auto& peer : peers)
    if (auto it = conns_.find(peer); it != conns_.end() && has_whole_frame(it->second))
      take_frames(peer);
  // Stale connections.
  std::vector<peer_id> stale;
  for (auto& [peer, c] : conns_) {
    bool done = c.eof && c.busy == 0 && c.out.empty() && !has_whole_frame(c);
    bool idle = c.busy == 0 && c.out.empty() && c.in.empty() && now - c.active_ms > idle_ms;
    bool half = c.partial_since_ms >= 0 && now - c.partial_since_ms > stalled_ms;
    bool unread = c.out_since_ms >= 0 && now - c.out_since_ms > stalled_ms;
    if (done || idle || half || unread)
      stale.push_back(peer);
  }
  for (auto& peer : stale)
    close(peer);
}

void local_server::accept_all(std::int64_t now) {
  for (int i = 0; i < 64; ++i) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        spdlog::warn("the local socket cannot accept: {}; trying again in 100 ms",
                     std::strerror(errno));
        accept_after_ms_ = now + 100;
      }
      return;
    }
    peer_id peer(1, id_mark);
    peer += std::to_string(next_++);
    conns_.emplace(peer, connection{fd, {}, {}, 0, false, now, -1, -1});
    if (conns_.size() > max_connections) {
      ++refused_;
      say_and_close(peer,
                    encode_error(0, errc::unavailable,
                                 fmt::format("the coordinator's local socket has {} connections "
                                             "already; try again",
                                             max_connections)));
    }
  }
}

void local_server::read_some(const peer_id& peer, connection& c, std::int64_t now) {
  char buf[64 << 10]; // one read per wake-up: bounded work, and bounded bytes
  auto n = ::read(c.fd, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (n < 0) {
    close(peer);
    return;
  }
  if (n == 0) {
    c.eof = true; // what it sent whole is still answered
    return;
  }
  c.in.append(buf, static_cast<std::size_t>(n));
  c.active_ms = now;
  if (c.partial_since_ms < 0)
    c.partial_since_ms = now; // cleared once no unfinished frame is left
}

bool local_server::take_frames(const peer_id& peer) {
  auto it = conns_.find(peer);
  int taken = 0;
  for (; taken < frames_per_wake && it != conns_.end(); ++taken) {
    auto& c = it->second;
    if (c.in.size() < local_wire::header_bytes)
      break;
    auto len = local_wire::announced(c.in);
    if (!len) {
      ++refused_;
      // A ZeroMQ client's greeting (first byte 0xFF) could not read a frame.
      if (static_cast<unsigned char>(c.in[0]) == local_wire::zmtp_signature) {
        close(peer);
        return false;
      }
      say_and_close(peer, encode_error(0, errc::malformed,
                                       fmt::format("a frame length of 0 or above {} bytes",
                                                   limits::frame_bytes)));
      return false;
    }
    if (c.in.size() - local_wire::header_bytes < *len)
      break;
    ++c.busy;
    auto frame = c.in.substr(local_wire::header_bytes, *len);
    c.in.erase(0, local_wire::header_bytes + *len);
    dispatch_(peer, std::move(frame)); // may answer at once, and may close the connection
    it = conns_.find(peer);
  }
  if (it == conns_.end())
    return false;
  auto& c = it->second;
  if (c.in.empty() || has_whole_frame(c))
    c.partial_since_ms = -1; // whole frames wait their turn, not the peer
  else if (c.partial_since_ms < 0 || taken > 0)
    c.partial_since_ms = mono_ms(); // the unfinished frame began after the last one taken
  return true;
}

void local_server::write_some(const peer_id& peer, std::int64_t now) {
  auto it = conns_.find(peer);
  if (it == conns_.end())
    return;
  auto& c = it->second;
  while (!c.out.empty()) {
    auto n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      break;
    if (n <= 0) {
      close(peer);
      return;
    }
    c.out.erase(0, static_cast<std::size_t>(n));
    c.active_ms = now;
    c.out_since_ms = now;
  }
  if (c.out.empty())
    c.out_since_ms = -1;
}

bool local_server::send(const peer_id& peer, const std::string& bytes) {
  auto it = conns_.find(peer);
  if (it == conns_.end())
    return true; // it went away: its reply is dropped, as ZeroMQ drops it
  auto& c = it->second;
  auto total = buffered();
  bool was_reading = reading(c, total > max_buffered_bytes);
  if (c.busy > 0)
    --c.busy;
  if (c.out.size() + bytes.size() > max_unread_bytes ||
      total + bytes.size() > 2 * max_buffered_bytes) {
    spdlog::warn("a local client does not read its replies; closing its connection");
    close(peer);
    return false;
  }
  if (c.out.empty())
    c.out_since_ms = mono_ms();
  c.out += local_wire::framed(bytes);
  write_some(peer, mono_ms());
  it = conns_.find(peer);
  if (it == conns_.end())
    return false;
  bool over = buffered() > max_buffered_bytes;
  return it->second.out.empty() && !it->second.eof && reading(it->second, over) == was_reading &&
         over == (total > max_buffered_bytes); // the budget reads the others too
}

void local_server::unanswered(const peer_id& peer) {
  if (auto it = conns_.find(peer); it != conns_.end() && it->second.busy > 0)
    --it->second.busy;
}

void local_server::say_and_close(const peer_id& peer, const std::string& error_frame) {
  auto it = conns_.find(peer);
  if (it == conns_.end())
    return;
  // One attempt, not waited on: a fresh connection's buffer takes it.
  auto bytes = local_wire::framed(error_frame);
  (void)!::send(it->second.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close(peer);
}

void local_server::close(const peer_id& peer) {
  auto it = conns_.find(peer);
  if (it == conns_.end())
    return;
  ::close(it->second.fd);
  conns_.erase(it);
}

} // namespace cq::bus
