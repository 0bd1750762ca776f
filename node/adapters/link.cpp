// The coordinator link (seams.hpp) over ZeroMQ: one DEALER socket, owned by
// one thread (ADR 0002's one owner per socket, kept here by ADR 0020).
//
// Outbound frames are queued by any thread and the socket thread is woken
// through an eventfd polled beside the socket. A send never blocks and
// never queues inside ZeroMQ while disconnected (ZMQ_IMMEDIATE): a frame that
// finds no connection is dropped and its tag handed back, so the daemon
// retries on its own schedule instead of a burst of stale heartbeats on
// reconnect. Inbound, the frames waiting at a wake-up (at most
// max_frames_per_wake, so a flood cannot starve the outbound queue) are
// handed on together, so the daemon reads all of them before acting on any.
#include "node/adapters/adapters.hpp"

#include "cq/bus/wakeup.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include <unistd.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

namespace cq::node {

namespace {

/// Frames received per wake-up.
constexpr std::size_t max_frames_per_wake = 64;
/// Frames queued for sending, at most; more are dropped as unsent (the
/// daemon's own retries bound what it queues; this bounds a bug).
constexpr std::size_t max_queued = 4096;

class zmq_link final : public coordinator_link {
public:
  zmq_link(std::string endpoint, std::optional<bus::client_curve> curve)
      : endpoint_(std::move(endpoint)), curve_(std::move(curve)) {}
  ~zmq_link() override { stop(); }

  status start(handlers h) override {
    h_ = std::move(h);
    if (!wake_.valid())
      return bus::error_info{errc::internal, "cannot create a wake-up descriptor for the link"};
    try {
      sock_.set(zmq::sockopt::linger, 0);
      sock_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(bus::limits::frame_bytes));
      sock_.set(zmq::sockopt::immediate, true);
      // ZMTP heartbeats notice a silently dead connection (a cut cable) and reconnect.
      sock_.set(zmq::sockopt::heartbeat_ivl, 1000);
      sock_.set(zmq::sockopt::heartbeat_timeout, 5000);
      if (curve_) {
        sock_.set(zmq::sockopt::curve_serverkey, curve_->server_key);
        sock_.set(zmq::sockopt::curve_publickey, curve_->own.public_key);
        sock_.set(zmq::sockopt::curve_secretkey, curve_->own.secret_key);
      }
      sock_.connect(endpoint_);
    } catch (const zmq::error_t& e) {
      return bus::error_info{errc::invalid_argument,
                             fmt::format("cannot connect to {}: {}", endpoint_, e.what())};
    }
    thread_ = std::thread([this] { loop(); });
    return done{};
  }

  void send(std::string bytes, std::uint64_t tag) override {
    bool full = false;
    {
      std::lock_guard lock(m_);
      if (stopped_)
        return;
      full = out_.size() >= max_queued;
      if (!full) {
        // flush() takes the whole queue under this lock: a frame queued
        // behind others rides on their wake-up.
        if (out_.empty())
          wake_.notify();
        out_.emplace_back(std::move(bytes), tag);
      }
    }
    if (full && tag != 0 && h_.on_unsent)
      h_.on_unsent(tag);
  }

  void stop() override {
    {
      std::lock_guard lock(m_);
      if (stopped_)
        return;
      stopped_ = true;
    }
    if (thread_.joinable()) {
      wake_.notify();
      thread_.join();
    }
  }

private:
  bool try_send(const std::string& bytes) {
    bool ok = false;
    try {
      ok = sock_.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
    } catch (const zmq::error_t& e) {
      spdlog::warn("send failed: {}", e.what());
    }
    if (ok && link_up_ != 1)
      spdlog::info("connected to the coordinator at {}", endpoint_);
    if (!ok && link_up_ == 1)
      spdlog::warn("coordinator at {} unreachable; retrying", endpoint_);
    link_up_ = ok ? 1 : 0;
    return ok;
  }

  void flush() {
    std::deque<std::pair<std::string, std::uint64_t>> batch;
    {
      std::lock_guard lock(m_);
      batch.swap(out_);
    }
    for (auto& [bytes, tag] : batch)
      if (!try_send(bytes) && tag != 0 && h_.on_unsent)
        h_.on_unsent(tag);
  }

  void receive() {
    std::vector<std::string> batch;
    receive_into(batch);
    if (!batch.empty())
      h_.on_frames(std::move(batch));
  }

  void receive_into(std::vector<std::string>& batch) {
    for (std::size_t i = 0; i < max_frames_per_wake; ++i) {
      zmq::message_t msg;
      try {
        if (!sock_.recv(msg, zmq::recv_flags::dontwait))
          return;
        if (msg.more()) {
          // The protocol is one frame per message: drop the whole multipart message.
          while (msg.more() && sock_.recv(msg, zmq::recv_flags::dontwait)) {
          }
          spdlog::warn("dropped a multipart message from the coordinator");
          continue;
        }
      } catch (const zmq::error_t& e) {
        spdlog::warn("receive failed: {}", e.what());
        return;
      }
      batch.emplace_back(msg.to_string_view());
    }
  }

  void loop() {
    for (;;) {
      zmq::pollitem_t items[] = {{sock_.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, wake_.fd(), ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(1000));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR)
          continue;
        spdlog::critical("the coordinator link cannot poll: {}", e.what());
        return;
      }
      if (items[1].revents & ZMQ_POLLIN)
        wake_.drain();
      {
        std::lock_guard lock(m_);
        if (stopped_)
          return;
      }
      if (items[0].revents & ZMQ_POLLIN)
        receive();
      flush();
    }
  }

  std::string endpoint_;
  std::optional<bus::client_curve> curve_;
  handlers h_;
  zmq::context_t ctx_{1};
  zmq::socket_t sock_{ctx_, zmq::socket_type::dealer}; ///< used by the thread only (after start)
  bus::wakeup wake_; ///< wakes the thread for frames to send and for stop
  std::mutex m_;     ///< guards out_ and stopped_
  std::deque<std::pair<std::string, std::uint64_t>> out_; ///< frames to send, with their tags
  bool stopped_ = false;
  int link_up_ = -1; ///< whether the last send found a connection (-1 = none yet)
  std::thread thread_;
};

} // namespace

std::unique_ptr<coordinator_link> make_link(std::string endpoint,
                                            std::optional<bus::client_curve> curve) {
  return std::make_unique<zmq_link>(std::move(endpoint), std::move(curve));
}

} // namespace cq::node
