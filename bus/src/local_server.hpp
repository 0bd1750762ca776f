#pragma once
// The gateway's local socket (local_wire.hpp, docs/adr/0047): a Unix stream
// socket whose connections the gateway thread reads and writes itself,
// beside its ZeroMQ socket.
//
// What a local peer (any local user: the socket is 0666) can make it hold is
// bounded: connections, a connection's requests in flight and unread
// replies, the bytes of unfinished frames, and the frames taken per wake-up
// (so ZeroMQ's peers, the nodes, are not starved). A peer that breaks a
// bound loses its own connection, after an error frame where it can read
// one; no other connection is touched.
//
// The gateway thread runs all of it, except send(): a reply may be written
// by the thread that made it, under the gateway's lock (gateway.cpp).

#include "cq/bus/gateway.hpp"

#include <zmq.hpp>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cq::bus {

class local_server {
public:
  /// Takes each whole frame a local peer sent.
  using dispatch_fn = std::function<void(const peer_id&, std::string frame)>;

  explicit local_server(dispatch_fn dispatch);
  ~local_server(); ///< closes every connection; removes the socket file if it is still ours
  local_server(const local_server&) = delete;
  local_server& operator=(const local_server&) = delete;

  /// Serves `path`; throws std::runtime_error when it cannot (a file that is
  /// not a socket there, or a socket another process still serves).
  void bind(const std::string& path);

  /// Local peers' ids start with this byte; a ZeroMQ peer's may not.
  static constexpr char id_mark = '\x01';
  static bool is_local(const peer_id& peer) { return !peer.empty() && peer[0] == id_mark; }

  /// Appends what to poll; the most the poll may wait (0 while frames
  /// already read wait for their turn).
  std::chrono::milliseconds add_poll_items(std::vector<zmq::pollitem_t>& items,
                                           std::chrono::milliseconds wait);
  /// Handles what the poll found for the items added at `first`: accepts,
  /// reads, writes, takes the frames due this wake-up, ends stale connections.
  void after_poll(const std::vector<zmq::pollitem_t>& items, std::size_t first);

  /// Writes the reply `bytes` to `peer` as far as its socket takes now, and
  /// queues the rest (dropped when the peer is gone). Returns whether the
  /// poll this thread's owner may be waiting in still fits: false when the
  /// reply left bytes to write, closed the connection, ended its last
  /// request after the peer's end, or let it be read again.
  bool send(const peer_id& peer, const std::string& bytes);
  /// A frame of `peer`'s that gets no reply (it was itself a reply).
  void unanswered(const peer_id& peer);

  std::uint64_t refused() const { return refused_; }

  /// The bounds (see the top of this file).
  static constexpr std::size_t max_connections = 512;
  static constexpr std::uint64_t max_in_flight = 256;
  static constexpr std::size_t max_unread_bytes = 16 << 20;
  static constexpr std::size_t max_buffered_bytes = 256
                                                    << 20; ///< every connection's, read or unread
  static constexpr int frames_per_wake = 64;
  static constexpr std::int64_t idle_ms = 120'000;
  static constexpr std::int64_t stalled_ms = 30'000;

private:
  struct connection {
    int fd = -1;
    std::string in;                     ///< bytes read; whole frames at the front are taken in turn
    std::string out;                    ///< framed replies not yet written
    std::uint64_t busy = 0;             ///< requests taken and not yet answered
    bool eof = false;                   ///< the peer will send nothing more
    std::int64_t active_ms = 0;         ///< last byte either way
    std::int64_t partial_since_ms = -1; ///< since when `in` holds an unfinished frame
    std::int64_t out_since_ms = -1;     ///< since when `out` made no progress
  };

  void accept_all(std::int64_t now);
  void read_some(const peer_id& peer, connection& c, std::int64_t now);
  void write_some(const peer_id& peer, std::int64_t now);
  /// Takes up to frames_per_wake whole frames; false when it closed `peer`.
  bool take_frames(const peer_id& peer);
  bool has_whole_frame(const connection& c) const;
  /// Whether the poll reads `c` (backpressure); `over_budget` as computed
  /// for the whole poll.
  bool reading(const connection& c, bool over_budget) const;
  void say_and_close(const peer_id& peer, const std::string& error_frame);
  void close(const peer_id& peer);
  std::size_t buffered() const;

  dispatch_fn dispatch_;
  int listen_fd_ = -1;
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::map<peer_id, connection> conns_;
  std::vector<peer_id> polled_; ///< the peer of each connection item added
  std::uint64_t next_ = 0;
  std::int64_t accept_after_ms_ = 0; ///< out of descriptors: accept again from then
  std::uint64_t refused_ = 0;
};

} // namespace cq::bus
