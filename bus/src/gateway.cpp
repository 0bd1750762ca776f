#include "cq/bus/gateway.hpp"
#include "cq/bus/wakeup.hpp"
#include "local_server.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <deque>
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
  /// Guards `local`: the gateway thread holds it while it works on the local
  /// socket (not while it polls, nor while it decodes and hands on the
  /// frames taken), and any thread takes it to write a local peer's reply
  /// itself (send()).
  std::mutex local_mtx;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> in{0}, refused{0};
  std::thread thread;

  /// Frames the local socket took this wake-up: dispatched after local_mtx
  /// is released, so a handler never runs under it and an actor that writes
  /// a reply does not wait for the decoding of others. Gateway thread only.
  std::vector<std::pair<peer_id, std::string>> taken;
  /// The local socket (local_server.hpp), when bound.
  local_server local{[this](const peer_id& peer, std::string frame) {
    ++in;
    taken.emplace_back(peer, std::move(frame));
  }};
  /// The longest poll without a wake-up (tests lengthen it: a wake-up that
  /// is missing then fails their deadlines instead of costing 500 ms).
  std::chrono::milliseconds max_poll{500};

  void run() {
    // Bounded work per wake-up so a flood on the socket cannot starve replies.
    constexpr int max_batch = 256;
    std::vector<zmq::pollitem_t> items;
    while (!stopping.load()) {
      items.clear();
      items.push_back({sock.handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({nullptr, wake.fd(), ZMQ_POLLIN, 0});
      items.push_back({zap ? zap->handle() : nullptr, zap ? 0 : -1,
                       static_cast<short>(zap ? ZMQ_POLLIN : 0), 0});
      constexpr std::size_t fixed = 3;
      std::chrono::milliseconds wait;
      {
        std::lock_guard<std::mutex> g(local_mtx);
        wait = local.add_poll_items(items, max_poll);
      }
      try {
        zmq::poll(items.data(), items.size(), wait);
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
      {
        std::lock_guard<std::mutex> g(local_mtx);
        local.after_poll(items, fixed);
      }
      for (auto& [peer, frame] : taken)
        dispatch(peer, frame, {}, {});
      taken.clear();
      for (int i = 0; i < max_batch; ++i)
        if (!receive_one())
          break;
      flush();
    }
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
    if (local_server::is_local(peer)) {
      // A routing id a DEALER chose to look like a local peer's: its replies
      // would go to that connection. Answered here, on ZeroMQ, and dropped.
      ++refused;
      zmq_reply(peer, encode_error(0, errc::malformed,
                                   "routing ids starting with byte 0x01 are reserved"));
      return true;
    }
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
      if (local_server::is_local(peer)) {
        std::lock_guard<std::mutex> g(local_mtx);
        local.unanswered(peer); // nodes answer orders over ZeroMQ only
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
    if (local_server::is_local(peer)) {
      std::lock_guard<std::mutex> g(local_mtx);
      local.send(peer, bytes);
    } else
      zmq_reply(peer, bytes);
  }

  void zmq_reply(const peer_id& peer, const std::string& bytes) {
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
}

std::string gateway::endpoint() const {
  return impl_->bound;
}

void gateway::bind_local(const std::string& path) {
  impl_->local.bind(path);
}

void gateway::set_max_poll(std::chrono::milliseconds wait) {
  impl_->max_poll = wait;
}

void gateway::start() {
  impl_->thread = std::thread([this] { impl_->run(); });
}

bool gateway::is_local(const peer_id& peer) {
  return local_server::is_local(peer);
}

void gateway::send(const peer_id& peer, std::string bytes) {
  // A local peer's reply is written by the calling thread (the coordinator's
  // actor that answered): the gateway thread wakes only when that left it
  // something to do (docs/adr/0056).
  if (local_server::is_local(peer)) {
    bool settled;
    {
      std::lock_guard<std::mutex> g(impl_->local_mtx);
      settled = impl_->local.send(peer, bytes);
    }
    if (!settled)
      impl_->wake.notify();
    return;
  }
  // The gateway thread takes the whole queue at each wake-up (flush(), under
  // the same lock): a frame queued behind others rides on their wake-up,
  // which is written before the lock is released.
  std::lock_guard<std::mutex> g(impl_->mtx);
  if (impl_->outq.empty())
    impl_->wake.notify();
  impl_->outq.emplace_back(peer, std::move(bytes));
}

std::uint64_t gateway::frames_in() const {
  return impl_->in;
}
std::uint64_t gateway::frames_refused() const {
  std::lock_guard<std::mutex> g(impl_->local_mtx);
  return impl_->refused + impl_->local.refused();
}

} // namespace cq::bus
