#pragma once
// The coordinator's side of the wire: one thread owns the ROUTER socket.
//
// Inbound: each frame is decoded and validated on the gateway thread; a frame
// that fails gets an error reply right there and never reaches an actor. A
// valid request goes to `on_request`, a reply (a node answering an order) to
// `on_reply`. Both callbacks run on the gateway thread and must only hand the
// message on (the coordinator's callbacks `anon_send` into actors); they may
// call send(), and must not wait for a thread that does.
// Outbound: any thread calls send(); a ZeroMQ peer's frame is queued and the
// gateway thread is woken through an eventfd polled beside the socket; a
// local peer's is written by the calling thread (docs/adr/0056).
// No CAF here: the coordinator binds the callbacks to its actors.

#include "cq/bus/codec.hpp"
#include "cq/bus/curve.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace cq::bus {

/// Opaque ZeroMQ routing identity of a connected peer.
using peer_id = std::string;

class gateway {
public:
  struct handlers {
    /// `addr` is the peer's IP address ("" when the transport has none);
    /// `key` the CURVE public key (Z85) it connected with ("" when plain).
    std::function<void(const peer_id&, const std::string& addr, const std::string& key,
                       const frame&, coordinator_request)>
        on_request;
    std::function<void(const peer_id&, const frame&)> on_reply;
  };

  /// Binds `endpoint` (e.g. "tcp://127.0.0.1:7800"; port 0 picks a free one);
  /// with `curve`, as a CurveZMQ server with that keypair: every connection
  /// is encrypted, and a ZAP handler on the gateway thread records each
  /// client's public key. Throws std::runtime_error when the bind fails.
  gateway(const std::string& endpoint, handlers h,
          std::optional<curve_keypair> curve = std::nullopt);
  ~gateway(); ///< stops the thread
  gateway(const gateway&) = delete;
  gateway& operator=(const gateway&) = delete;

  /// Whether `peer` is a connection on the local socket, whose replies any
  /// thread writes at once (docs/adr/0056); the others' go through the
  /// socket thread.
  static bool is_local(const peer_id& peer);
  /// The bound endpoint with the real port.
  std::string endpoint() const;
  /// Also serves on the Unix socket at `path` (ipc://), before start(): the
  /// same-machine clients' way in (docs/adr/0032). A file already at `path`
  /// that is not a socket is left alone and refused; the socket is made
  /// 0666 (a token still decides who may do what, as on loopback TCP).
  /// Throws std::runtime_error when the bind fails.
  void bind_local(const std::string& path);
  /// The longest the socket thread sleeps without a wake-up (500 ms), before
  /// start(). Tests lengthen it, so that a wake-up the code fails to send
  /// shows as a missed deadline.
  void set_max_poll(std::chrono::milliseconds wait);
  /// Starts the socket thread.
  void start();
  /// Sends `bytes` to `peer`; safe from any thread. Frames for a peer that
  /// is gone are dropped (the peer retries its request).
  void send(const peer_id& peer, std::string bytes);
  /// Counters for tests and the board.
  std::uint64_t frames_in() const;
  std::uint64_t frames_refused() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace cq::bus
