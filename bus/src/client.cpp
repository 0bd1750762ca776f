#include "cq/bus/client.hpp"

#include <fmt/format.h>
#include <zmq.hpp>

#include <algorithm>
#include <cerrno>
#include <map>

namespace cq::bus {

namespace {

/// One ZeroMQ context for the whole process, as ZeroMQ recommends, made on
/// first use and never terminated: its two threads end with the process.
/// Terminating a context per client (a handshake with each of its threads)
/// cost a short `cq` command about 5% of its CPU; a client now closes only
/// its socket (linger 0).
zmq::context_t& process_context() {
  static auto* ctx = new zmq::context_t(1);
  return *ctx;
}

} // namespace

struct client::impl {
  zmq::socket_t sock{process_context(), zmq::socket_type::dealer};
  std::chrono::milliseconds timeout;
};

client::client(std::string endpoint, std::string token, std::chrono::milliseconds timeout,
               std::optional<client_curve> curve)
    : impl_(std::make_unique<impl>()), token_(std::move(token)) {
  impl_->timeout = timeout;
  impl_->sock.set(zmq::sockopt::linger, 0);
  if (curve) {
    impl_->sock.set(zmq::sockopt::curve_serverkey, curve->server_key);
    impl_->sock.set(zmq::sockopt::curve_publickey, curve->own.public_key);
    impl_->sock.set(zmq::sockopt::curve_secretkey, curve->own.secret_key);
  }
  impl_->sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits::frame_bytes));
  impl_->sock.connect(endpoint);
}

client::~client() = default;

result<frame> client::round_trip(const std::string& bytes) {
  auto id = next_id_++;
  try {
    impl_->sock.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    auto deadline = std::chrono::steady_clock::now() + impl_->timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        break;
      zmq::pollitem_t items[] = {{impl_->sock.handle(), 0, ZMQ_POLLIN, 0}};
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
      if (!impl_->sock.recv(*msg, zmq::recv_flags::dontwait))
        continue;
      std::uint64_t seen = 0;
      // The frame keeps the message it was decoded from (no copy of a
      // listing's megabytes).
      auto f = decode_frame(msg->to_string_view(), msg, seen);
      if (!f)
        return f.error();
      // Replies to earlier, timed-out requests are dropped.
      if (!f->is_reply || (f->id != id && f->id != 0))
        continue;
      return f;
    }
  } catch (const zmq::error_t& e) {
    return error_info{errc::unavailable, fmt::format("transport error: {}", e.what())};
  }
  return error_info{
      errc::unavailable,
      fmt::format("no reply within {} ms (is the coordinator running?)", impl_->timeout.count())};
}

std::vector<result<frame>> client::round_trips(const std::vector<std::string>& bytes,
                                               const std::vector<std::uint64_t>& ids,
                                               std::size_t window) {
  std::vector<result<frame>> out(bytes.size(), error_info{errc::unavailable, ""});
  std::map<std::uint64_t, std::size_t> waiting; // request id -> index
  std::size_t sent = 0, answered = 0;
  window = std::max<std::size_t>(window, 1);
  auto no_reply = [&] {
    return error_info{
        errc::unavailable,
        fmt::format("no reply within {} ms (is the coordinator running?)", impl_->timeout.count())};
  };
  try {
    auto deadline = std::chrono::steady_clock::now() + impl_->timeout;
    while (answered < bytes.size()) {
      while (sent < bytes.size() && waiting.size() < window) {
        impl_->sock.send(zmq::buffer(bytes[sent]), zmq::send_flags::dontwait);
        waiting.emplace(ids[sent], sent);
        ++sent;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        break;
      zmq::pollitem_t items[] = {{impl_->sock.handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 1, left);
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR)
          continue;
        throw;
      }
      if (!(items[0].revents & ZMQ_POLLIN))
        continue;
      auto msg = std::make_shared<zmq::message_t>();
      if (!impl_->sock.recv(*msg, zmq::recv_flags::dontwait))
        continue;
      std::uint64_t seen = 0;
      auto f = decode_frame(msg->to_string_view(), msg, seen);
      if (!f || !f->is_reply)
        continue; // nothing to tie it to: its request times out
      auto w = waiting.find(f->id);
      if (w == waiting.end())
        continue; // a reply to an earlier, timed-out request
      out[w->second] = std::move(f);
      waiting.erase(w);
      ++answered;
      deadline = std::chrono::steady_clock::now() + impl_->timeout; // progress
    }
  } catch (const zmq::error_t& e) {
    for (auto& [id, i] : waiting)
      out[i] = error_info{errc::unavailable, fmt::format("transport error: {}", e.what())};
    for (auto i = sent; i < bytes.size(); ++i)
      out[i] = error_info{errc::unavailable, fmt::format("transport error: {}", e.what())};
    return out;
  }
  for (auto& [id, i] : waiting)
    out[i] = no_reply();
  for (auto i = sent; i < bytes.size(); ++i)
    out[i] = no_reply();
  return out;
}

} // namespace cq::bus
