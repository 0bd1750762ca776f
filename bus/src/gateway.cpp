#include "cq/bus/gateway.hpp"
#include "cq/bus/local_wire.hpp"
#include "cq/bus/wakeup.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace cq::bus {

struct gateway::impl {
  handlers h;
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::router};
  std::optional<zmq::socket_t> zap; ///< the ZAP handler's socket (CURVE only)
  std::string bound;
  wakeup wake; ///< the socket thread polls it for new replies and stop
  std::mutex mtx;
  std::deque<std::pair<peer_id, std::string>> outq; // guarded by mtx
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> in{0}, refused{0};
  std::thread thread;

  /// One connection to the local socket (local_wire.hpp), owned by the
  /// gateway thread.
  struct local_conn {
    int fd = -1;
    std::string in;         ///< bytes read and not yet a whole frame
    std::string out;        ///< framed replies not yet written
    std::uint64_t busy = 0; ///< requests handed on and not yet answered
    std::int64_t quiet_since_ms = 0;
  };
  int listen_fd = -1;
  std::string local_path;
  ino_t local_inode = 0;
  std::map<peer_id, local_conn> locals;
  std::uint64_t next_local = 0;
  /// Bounds on what local peers can make the gateway hold: connections, a
  /// peer's unread replies, and how long a connection may sit idle (nothing
  /// in flight) or with half a frame.
  static constexpr std::size_t max_locals = 512;
  static constexpr std::size_t max_unread_bytes = 64 << 20;
  static constexpr std::int64_t idle_ms = 120'000;
  static constexpr std::int64_t partial_ms = 30'000;

  static std::int64_t mono_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void run() {
    // Bounded work per wake-up so a flood on the socket cannot starve replies.
    constexpr int max_batch = 256;
    std::vector<zmq::pollitem_t> items;
    std::vector<peer_id> polled; // the local peer of items[fixed + i]
    while (!stopping.load()) {
      items.clear();
      polled.clear();
      items.push_back({sock.handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({nullptr, wake.fd(), ZMQ_POLLIN, 0});
      items.push_back({zap ? zap->handle() : nullptr, zap ? 0 : -1,
                       static_cast<short>(zap ? ZMQ_POLLIN : 0), 0});
      items.push_back({nullptr, listen_fd, static_cast<short>(listen_fd >= 0 ? ZMQ_POLLIN : 0), 0});
      constexpr std::size_t fixed = 4;
      for (auto& [peer, c] : locals) {
        short events = ZMQ_POLLIN;
        if (!c.out.empty())
          events |= ZMQ_POLLOUT;
        items.push_back({nullptr, c.fd, events, 0});
        polled.push_back(peer);
      }
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(500));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR)
          continue;
        spdlog::error("gateway poll failed: {}", e.what());
        return;
      }
      if (items[1].revents & ZMQ_POLLIN)
        wake.drain();
      if (zap && (items[2].revents & ZMQ_POLLIN))
        for (int i = 0; i < max_batch; ++i)
          if (!authenticate_one())
            break;
      if (items[3].revents & ZMQ_POLLIN)
        accept_locals();
      for (std::size_t i = 0; i < polled.size(); ++i) {
        auto r = items[fixed + i].revents;
        if (r & ZMQ_POLLOUT)
          write_local(polled[i]);
        if (r & (ZMQ_POLLIN | ZMQ_POLLERR))
          read_local(polled[i]);
      }
      for (int i = 0; i < max_batch; ++i)
        if (!receive_one())
          break;
      flush();
      expire_locals();
    }
    for (auto& [peer, c] : locals)
      ::close(c.fd);
    locals.clear();
  }

  void accept_locals() {
    for (int i = 0; i < 64; ++i) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0)
        return;
      if (locals.size() >= max_locals) {
        ::close(fd); // the peer reads its end: it retries, or says so
        continue;
      }
      peer_id peer("\x01L", 2);
      peer += std::to_string(next_local++);
      locals.emplace(peer, local_conn{fd, {}, {}, 0, mono_ms()});
    }
  }

  void close_local(const peer_id& peer) {
    auto c = locals.find(peer);
    if (c == locals.end())
      return;
    ::close(c->second.fd);
    locals.erase(c);
  }

  /// What the peer sent: each whole frame goes the ZeroMQ frames' way.
  void read_local(const peer_id& peer) {
    auto it = locals.find(peer);
    if (it == locals.end())
      return;
    char buf[64 << 10];
    for (int round = 0; round < 16; ++round) { // bounded work per wake-up
      auto n = ::read(it->second.fd, buf, sizeof buf);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close_local(peer);
        return;
      }
      if (n < 0)
        break;
      it->second.in.append(buf, static_cast<std::size_t>(n));
      it->second.quiet_since_ms = mono_ms();
      if (static_cast<std::size_t>(n) < sizeof buf)
        break;
    }
    auto* pending = &it->second.in;
    std::size_t at = 0;
    while (pending->size() - at >= local_wire::header_bytes) {
      auto len = local_wire::announced(std::string_view(*pending).substr(at));
      if (!len) {
        ++refused; // not our framing (a ZeroMQ client, say), or too long
        close_local(peer);
        return;
      }
      if (pending->size() - at - local_wire::header_bytes < *len)
        break;
      ++this->in;
      ++it->second.busy;
      // The frame is decoded into owned values before anything can touch
      // the buffer again.
      dispatch(peer, std::string_view(*pending).substr(at + local_wire::header_bytes, *len), {},
               {});
      at += local_wire::header_bytes + *len;
      it = locals.find(peer); // a reply written meanwhile may have closed it
      if (it == locals.end())
        return;
      pending = &it->second.in;
    }
    it->second.in.erase(0, at);
  }

  void write_local(const peer_id& peer) {
    auto it = locals.find(peer);
    if (it == locals.end())
      return;
    auto& c = it->second;
    while (!c.out.empty()) {
      auto n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && errno == EAGAIN)
        return;
      if (n <= 0) {
        close_local(peer);
        return;
      }
      c.out.erase(0, static_cast<std::size_t>(n));
      c.quiet_since_ms = mono_ms();
    }
  }

  void send_local(const peer_id& peer, const std::string& bytes) {
    auto it = locals.find(peer);
    if (it == locals.end())
      return; // it went away: its reply is dropped, as ZeroMQ does
    auto& c = it->second;
    if (c.busy > 0)
      --c.busy;
    if (c.out.size() + bytes.size() > max_unread_bytes) {
      spdlog::warn("a local client does not read its replies; closing its connection");
      close_local(peer);
      return;
    }
    c.out += local_wire::framed(bytes);
    write_local(peer);
  }

  /// Connections that sit idle, or hold half a frame, for too long.
  void expire_locals() {
    auto now = mono_ms();
    std::vector<peer_id> stale;
    for (auto& [peer, c] : locals)
      if ((c.busy == 0 && c.out.empty() && now - c.quiet_since_ms > idle_ms) ||
          (!c.in.empty() && now - c.quiet_since_ms > partial_ms))
        stale.push_back(peer);
    for (auto& peer : stale)
      close_local(peer);
  }

  /// One ZAP request (RFC 27): every CURVE client is let in (tokens decide
  /// what it may do); its public key becomes the connection's User-Id, so
  /// the api can tie a node's identity to the key it joined with.
  bool authenticate_one() {
    std::vector<zmq::message_t> parts;
    try {
      zmq::message_t part;
      if (!zap->recv(part, zmq::recv_flags::dontwait))
        return false;
      parts.push_back(std::move(part));
      while (parts.back().more() && parts.size() < 16) {
        zmq::message_t next;
        (void)zap->recv(next, zmq::recv_flags::none);
        parts.push_back(std::move(next));
      }
    } catch (const zmq::error_t& e) {
      spdlog::warn("ZAP receive failed: {}", e.what());
      return false;
    }
    std::string status = "400", text = "bad ZAP request", user;
    if (parts.size() >= 7 && parts[5].to_string_view() == "CURVE" && parts[6].size() == 32) {
      char z85[41] = {};
      zmq_z85_encode(z85, static_cast<const std::uint8_t*>(parts[6].data()), 32);
      user = z85;
      status = "200", text = "OK";
    }
    std::string version = "1.0", request_id = parts.size() > 1 ? parts[1].to_string() : "";
    try {
      zap->send(zmq::buffer(version), zmq::send_flags::sndmore);
      zap->send(zmq::buffer(request_id), zmq::send_flags::sndmore);
      zap->send(zmq::buffer(status), zmq::send_flags::sndmore);
      zap->send(zmq::buffer(text), zmq::send_flags::sndmore);
      zap->send(zmq::buffer(user), zmq::send_flags::sndmore);
      zap->send(zmq::const_buffer(nullptr, 0), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      spdlog::warn("ZAP reply failed: {}", e.what());
    }
    return true;
  }

  bool receive_one() {
    std::vector<zmq::message_t> parts;
    try {
      zmq::message_t part;
      if (!sock.recv(part, zmq::recv_flags::dontwait))
        return false;
      parts.push_back(std::move(part));
      while (parts.back().more() && parts.size() < 8) {
        zmq::message_t next;
        (void)sock.recv(next, zmq::recv_flags::none);
        parts.push_back(std::move(next));
      }
      while (parts.back().more()) { // drain an over-long multipart message
        zmq::message_t next;
        (void)sock.recv(next, zmq::recv_flags::none);
        if (!next.more())
          break;
      }
    } catch (const zmq::error_t& e) {
      spdlog::warn("gateway receive failed: {}", e.what());
      return false;
    }
    ++in;
    peer_id peer = parts[0].to_string();
    if (parts.size() != 2) {
      ++refused;
      reply_now(peer, encode_error(0, errc::malformed, "expected exactly one frame per message"));
      return true;
    }
    auto property = [&](const char* name) {
      try {
        const char* v = parts[1].gets(name);
        return v ? std::string(v) : std::string();
      } catch (const zmq::error_t&) {
        return std::string(); // not on this transport
      }
    };
    dispatch(peer, parts[1].to_string_view(), property("Peer-Address"),
             zap ? property("User-Id") : std::string());
    return true;
  }

  /// One frame from `peer`, of either transport: a bad one is answered
  /// here, a reply goes to on_reply, a request to on_request.
  void dispatch(const peer_id& peer, std::string_view bytes, const std::string& addr,
                const std::string& key) {
    std::uint64_t seen = 0;
    auto f = decode_frame(bytes, seen);
    if (!f) {
      ++refused;
      reply_now(peer, encode_error(seen, f.error().code, f.error().message));
      return;
    }
    if (f->is_reply) {
      if (auto c = locals.find(peer); c != locals.end()) {
        --c->second.busy; // nodes answer orders over ZeroMQ only: nothing answers this
        return;
      }
      if (h.on_reply)
        h.on_reply(peer, *f);
      return;
    }
    auto req = decode_coordinator_request(*f);
    if (!req) {
      ++refused;
      reply_now(peer, encode_error(f->id, req.error().code, req.error().message));
      return;
    }
    h.on_request(peer, addr, key, *f, std::move(*req));
  }

  void reply_now(const peer_id& peer, const std::string& bytes) {
    if (!peer.empty() && peer[0] == '\x01') {
      send_local(peer, bytes);
      return;
    }
    try {
      sock.send(zmq::buffer(peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      sock.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::debug("gateway send to a peer failed: {}", e.what());
    }
  }

  void flush() {
    std::deque<std::pair<peer_id, std::string>> batch;
    {
      std::lock_guard<std::mutex> g(mtx);
      batch.swap(outq);
    }
    for (auto& [peer, bytes] : batch)
      reply_now(peer, bytes);
  }
};

gateway::gateway(const std::string& endpoint, handlers h, std::optional<curve_keypair> curve)
    : impl_(std::make_unique<impl>()) {
  impl_->h = std::move(h);
  if (curve) {
    // The ZAP handler must be bound before the first connection arrives.
    impl_->zap.emplace(impl_->ctx, zmq::socket_type::rep);
    impl_->zap->set(zmq::sockopt::linger, 0);
    impl_->zap->bind("inproc://zeromq.zap.01");
    impl_->sock.set(zmq::sockopt::curve_server, true);
    impl_->sock.set(zmq::sockopt::curve_secretkey, curve->secret_key);
    impl_->sock.set(zmq::sockopt::zap_domain, "cq");
  }
  impl_->sock.set(zmq::sockopt::linger, 0);
  impl_->sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits::frame_bytes));
  impl_->sock.set(zmq::sockopt::sndhwm, 100000);
  impl_->sock.set(zmq::sockopt::rcvhwm, 100000);

  try {
    impl_->sock.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format("cannot bind {}: {}", endpoint, e.what()));
  }
  impl_->bound = impl_->sock.get(zmq::sockopt::last_endpoint);
  if (!impl_->wake.valid())
    throw std::runtime_error("cannot create the gateway's wake-up descriptor");
}

gateway::~gateway() {
  impl_->stopping = true;
  impl_->wake.notify();
  if (impl_->thread.joinable())
    impl_->thread.join();
  if (impl_->listen_fd >= 0) {
    ::close(impl_->listen_fd);
    // Only our own socket: another coordinator may have replaced it since.
    struct stat st {};
    if (::lstat(impl_->local_path.c_str(), &st) == 0 && st.st_ino == impl_->local_inode)
      ::unlink(impl_->local_path.c_str());
  }
}

std::string gateway::endpoint() const {
  return impl_->bound;
}

void gateway::bind_local(const std::string& path) {
  // Only a socket (one an earlier run left behind) may be replaced.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode))
    throw std::runtime_error(
        fmt::format("cannot serve on {}: a file that is not a socket is there", path));
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    throw std::runtime_error(fmt::format("cannot serve on {}: the path is too long", path));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot serve on {}: {}", path, std::strerror(errno)));
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, 128) != 0) {
    auto why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error(fmt::format("cannot serve on {}: {}", path, why));
  }
  ::chmod(path.c_str(), 0666);
  impl_->listen_fd = fd;
  impl_->local_path = path;
  if (::lstat(path.c_str(), &st) == 0)
    impl_->local_inode = st.st_ino;
}

void gateway::start() {
  impl_->thread = std::thread([this] { impl_->run(); });
}

void gateway::send(const peer_id& peer, std::string bytes) {
  {
    std::lock_guard<std::mutex> g(impl_->mtx);
    impl_->outq.emplace_back(peer, std::move(bytes));
  }
  impl_->wake.notify();
}

std::uint64_t gateway::frames_in() const {
  return impl_->in;
}
std::uint64_t gateway::frames_refused() const {
  return impl_->refused;
}

} // namespace cq::bus
