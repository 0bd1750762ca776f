#include "cq/bus/client.hpp"
#include "cq/bus/local_wire.hpp"

#include <fmt/format.h>
#include <zmq.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

namespace cq::bus {

namespace {

/// One ZeroMQ context for the whole process, as ZeroMQ recommends, made on
/// first use and never terminated: its two threads end with the process.
/// Terminating a context per client (a handshake with each of its threads)
/// cost a short `cq` command about 5% of its CPU; a client now closes only
/// its socket (linger 0). A client of the local socket makes none.
zmq::context_t& process_context() {
  static auto* ctx = new zmq::context_t(1);
  return *ctx;
}

using clock_type = std::chrono::steady_clock;

/// A connection to the Unix socket at `path`, or -1 and why not. It never
/// waits: a socket whose queue of connections is full counts as refusing
/// (the caller then uses the endpoint). Sends give up after `timeout`.
int connect_unix(const std::string& path, std::chrono::milliseconds timeout, std::string& why) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    why = "the socket path is too long";
    return -1;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    why = std::strerror(errno);
    return -1;
  }
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    why = errno == EAGAIN ? "its queue of connections is full" : std::strerror(errno);
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

} // namespace

struct client::impl {
  std::optional<zmq::socket_t> sock; ///< the ZeroMQ transport
  std::optional<client_curve> curve;
  std::string path;  ///< the local socket's, for unix://
  int fd = -1;       ///< the local socket's connection
  std::string why;   ///< why it could not connect
  std::string in;    ///< bytes read from it, not yet a whole frame
  bool seen = false; ///< a byte came on this connection
  std::chrono::milliseconds timeout;

  ~impl() {
    if (fd >= 0)
      ::close(fd);
  }

  void open_zmq(const std::string& endpoint) {
    sock.emplace(process_context(), zmq::socket_type::dealer);
    sock->set(zmq::sockopt::linger, 0);
    if (curve) {
      sock->set(zmq::sockopt::curve_serverkey, curve->server_key);
      sock->set(zmq::sockopt::curve_publickey, curve->own.public_key);
      sock->set(zmq::sockopt::curve_secretkey, curve->own.secret_key);
    }
    sock->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits::frame_bytes));
    // An IPv6 address (tcp://[::1]:7800): ZeroMQ resolves IPv4 only unless told.
    if (endpoint.find("://[") != std::string::npos)
      sock->set(zmq::sockopt::ipv6, 1);
    sock->connect(endpoint);
  }

  void reconnect() {
    if (fd >= 0)
      ::close(fd);
    in.clear();
    seen = false;
    fd = connect_unix(path, timeout, why);
  }

  /// Before a send: a connection the coordinator closed while it sat idle
  /// (it ends idle ones) is made again rather than found closed afterwards.
  void reconnect_if_closed() {
    if (fd < 0)
      return reconnect();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0)
      return;
    char c;
    if (::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)
      reconnect();
  }

  bool send_all(const std::string& bytes) {
    auto framed = local_wire::framed(bytes);
    std::size_t at = 0;
    while (at < framed.size()) {
      auto n = ::send(fd, framed.data() + at, framed.size() - at, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      at += static_cast<std::size_t>(n);
    }
    return true;
  }
};

client::client(std::string endpoint, std::string token, std::chrono::milliseconds timeout,
               std::optional<client_curve> curve)
    : impl_(std::make_unique<impl>()), token_(std::move(token)) {
  impl_->timeout = timeout;
  impl_->curve = std::move(curve);
  if (endpoint.starts_with(local_wire::scheme)) {
    impl_->path = endpoint.substr(local_wire::scheme.size());
    impl_->fd = connect_unix(impl_->path, timeout, impl_->why);
    return;
  }
  impl_->open_zmq(endpoint);
}

client::~client() = default;

bool client::connected() const {
  return impl_->sock || impl_->fd >= 0;
}

std::string client::connect_error() const {
  return impl_->why;
}

result<frame> client::round_trip(const std::string& bytes) {
  auto id = next_id_++;
  return round_trips({bytes}, {id}, 1).front();
}

std::vector<result<frame>> client::round_trips(const std::vector<std::string>& bytes,
                                               const std::vector<std::uint64_t>& ids,
                                               std::size_t window) {
  std::vector<result<frame>> out(bytes.size(), error_info{errc::unavailable, ""});
  std::map<std::uint64_t, std::size_t> waiting; // request id -> index
  std::size_t sent = 0, answered = 0;
  window = std::max<std::size_t>(window, 1);
  auto& im = *impl_;
  auto time_left = [](clock_type::time_point deadline) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
  };
  std::string failure =
      fmt::format("no reply within {} ms (is the coordinator running?)", im.timeout.count());
  // A lone request takes a reply with id 0 too (an error for a frame the
  // coordinator could not read far enough to see its id).
  auto take = [&](result<frame> f) {
    if (!f || !f->is_reply)
      return;
    auto w = waiting.find(f->id);
    if (w == waiting.end() && f->id == 0 && bytes.size() == 1 && !waiting.empty())
      w = waiting.begin();
    if (w == waiting.end())
      return; // a reply to an earlier, timed-out request
    out[w->second] = std::move(f);
    waiting.erase(w);
    ++answered;
  };
  if (!im.sock) {
    // The local socket.
    im.reconnect_if_closed();
    if (im.fd < 0) {
      for (auto& r : out)
        r = error_info{
            errc::unavailable,
            fmt::format("cannot reach the coordinator's socket {}: {}", im.path, im.why)};
      return out;
    }
    auto deadline = clock_type::now() + im.timeout;
    bool zmtp = false;
    while (answered < bytes.size()) {
      while (sent < bytes.size() && waiting.size() < window) {
        if (!im.send_all(bytes[sent])) {
          failure = fmt::format("the coordinator's socket {} refused the request: {}", im.path,
                                std::strerror(errno));
          im.reconnect();
          goto done;
        }
        waiting.emplace(ids[sent], sent);
        ++sent;
      }
      auto left = time_left(deadline);
      if (left.count() <= 0)
        break;
      pollfd p{im.fd, POLLIN, 0};
      int rc = ::poll(&p, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR) // a signal (cq run's Ctrl-C): its handler decides
        continue;
      if (rc < 0) {
        failure = fmt::format("cannot wait on the coordinator's socket {}: {}", im.path,
                              std::strerror(errno));
        break;
      }
      if (rc == 0)
        continue;
      char buf[64 << 10];
      auto n = ::read(im.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        if (!im.seen) {
          // Closed before a single byte came back: an older coordinator's
          // ZeroMQ socket, which reads our first bytes as a bad greeting and
          // drops the connection without applying anything. (This
          // coordinator's socket says why in a frame before it closes one.)
          zmtp = true;
          break;
        }
        failure = fmt::format("the coordinator closed its socket {} before it answered", im.path);
        im.reconnect();
        break;
      }
      im.in.append(buf, static_cast<std::size_t>(n));
      bool first = !im.seen;
      im.seen = true;
      if (first && static_cast<unsigned char>(im.in[0]) == local_wire::zmtp_signature) {
        zmtp = true; // an older coordinator's ZeroMQ socket: it read nothing of ours
        break;
      }
      std::size_t at = 0;
      while (im.in.size() - at >= local_wire::header_bytes) {
        auto len = local_wire::announced(std::string_view(im.in).substr(at));
        if (!len) {
          failure = fmt::format("the coordinator's socket {} sent a malformed frame", im.path);
          im.reconnect();
          goto done;
        }
        if (im.in.size() - at - local_wire::header_bytes < *len)
          break;
        std::uint64_t seen = 0;
        auto f =
            decode_frame(std::string_view(im.in).substr(at + local_wire::header_bytes, *len), seen);
        if (!f && bytes.size() == 1) {
          im.in.erase(0, at + local_wire::header_bytes + *len);
          return {f.error()};
        }
        take(std::move(f));
        at += local_wire::header_bytes + *len;
        deadline = clock_type::now() + im.timeout; // progress
      }
      im.in.erase(0, at);
    }
    if (!zmtp)
      goto done;
    ::close(im.fd);
    im.fd = -1;
    im.in.clear();
    try {
      im.open_zmq("ipc://" + im.path);
    } catch (const zmq::error_t& e) {
      failure = fmt::format("transport error: {}", e.what());
      goto done;
    }
    waiting.clear();
    sent = 0;
  }
  try {
    auto deadline = clock_type::now() + im.timeout;
    while (answered < bytes.size()) {
      while (sent < bytes.size() && waiting.size() < window) {
        im.sock->send(zmq::buffer(bytes[sent]), zmq::send_flags::dontwait);
        waiting.emplace(ids[sent], sent);
        ++sent;
      }
      auto left = time_left(deadline);
      if (left.count() <= 0)
        break;
      zmq::pollitem_t items[] = {{im.sock->handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 1, left);
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) // a signal (cq run's Ctrl-C): its handler decides
          continue;
        throw;
      }
      if (!(items[0].revents & ZMQ_POLLIN))
        continue;
      auto msg = std::make_shared<zmq::message_t>();
      if (!im.sock->recv(*msg, zmq::recv_flags::dontwait))
        continue;
      std::uint64_t seen = 0;
      // The frame keeps the message it was decoded from (no copy of a
      // listing's megabytes).
      auto f = decode_frame(msg->to_string_view(), msg, seen);
      if (!f && bytes.size() == 1)
        return {f.error()};
      take(std::move(f));
      deadline = clock_type::now() + im.timeout; // progress
    }
  } catch (const zmq::error_t& e) {
    failure = fmt::format("transport error: {}", e.what());
  }
  // A fallback to ZeroMQ that heard nothing was likely wrong (this
  // coordinator's socket, closed as it stopped): the next call tries the
  // local framing again.
  if (!im.path.empty() && answered == 0) {
    im.sock.reset();
    im.fd = -1;
  }
done:
  for (auto& [id, i] : waiting)
    out[i] = error_info{errc::unavailable, failure};
  for (auto i = sent; i < bytes.size(); ++i)
    out[i] = error_info{errc::unavailable, failure};
  return out;
}

} // namespace cq::bus
