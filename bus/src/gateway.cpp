#include "cq/bus/gateway.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace cq::bus {

struct gateway::impl {
  handlers h;
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::router};
  std::string bound;
  int efd = -1;
  std::mutex mtx;
  std::deque<std::pair<peer_id, std::string>> outq; // guarded by mtx
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> in{0}, refused{0};
  std::thread thread;

  void run() {
    // Bounded work per wake-up so a flood on the socket cannot starve replies.
    constexpr int max_batch = 256;
    while (!stopping.load()) {
      zmq::pollitem_t items[] = {{sock.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, efd, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(500));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR)
          continue;
        spdlog::error("gateway poll failed: {}", e.what());
        return;
      }
      if (items[1].revents & ZMQ_POLLIN) {
        std::uint64_t v;
        [[maybe_unused]] auto n = ::read(efd, &v, sizeof v);
      }
      for (int i = 0; i < max_batch; ++i)
        if (!receive_one())
          break;
      flush();
    }
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
    std::uint64_t seen = 0;
    auto f = decode_frame(parts[1].to_string_view(), seen);
    if (!f) {
      ++refused;
      reply_now(peer, encode_error(seen, f.error().code, f.error().message));
      return true;
    }
    if (f->is_reply) {
      if (h.on_reply)
        h.on_reply(peer, *f);
      return true;
    }
    auto req = decode_coordinator_request(*f);
    if (!req) {
      ++refused;
      reply_now(peer, encode_error(f->id, req.error().code, req.error().message));
      return true;
    }
    const char* addr = nullptr;
    try {
      addr = parts[1].gets("Peer-Address");
    } catch (const zmq::error_t&) {
      addr = nullptr; // no address on this transport
    }
    h.on_request(peer, addr ? std::string(addr) : std::string(), *f, std::move(*req));
    return true;
  }

  void reply_now(const peer_id& peer, const std::string& bytes) {
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

gateway::gateway(const std::string& endpoint, handlers h) : impl_(std::make_unique<impl>()) {
  impl_->h = std::move(h);
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
  impl_->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->efd < 0)
    throw std::runtime_error("eventfd failed");
}

gateway::~gateway() {
  impl_->stopping = true;
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(impl_->efd, &one, sizeof one);
  if (impl_->thread.joinable())
    impl_->thread.join();
  ::close(impl_->efd);
}

std::string gateway::endpoint() const {
  return impl_->bound;
}

void gateway::start() {
  impl_->thread = std::thread([this] { impl_->run(); });
}

void gateway::send(const peer_id& peer, std::string bytes) {
  {
    std::lock_guard<std::mutex> g(impl_->mtx);
    impl_->outq.emplace_back(peer, std::move(bytes));
  }
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(impl_->efd, &one, sizeof one);
}

std::uint64_t gateway::frames_in() const {
  return impl_->in;
}
std::uint64_t gateway::frames_refused() const {
  return impl_->refused;
}

} // namespace cq::bus
