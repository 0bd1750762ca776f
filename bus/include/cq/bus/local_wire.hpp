#pragma once
// The coordinator's local socket (cq-coordinator --local-socket PATH,
// docs/adr/0047): this machine's `cq` commands speak to it over a Unix
// stream socket without ZeroMQ. Each message is the same frame as on the
// ZeroMQ transport (codec.hpp), preceded by its length as 4 bytes, most
// significant first. Requests and replies are matched by the frame's id, as
// over ZeroMQ; a client may have several requests in flight.
//
// A length of 0 or above limits::frame_bytes ends the connection (a ZeroMQ
// greeting, whose first byte is 0xFF, reads as such a length). An older
// coordinator served ZeroMQ (ipc://) on the same path: it sends its greeting
// or drops a connection whose first bytes are not one, applying nothing.
// A client that meets either before its first reply on a connection speaks
// ZeroMQ to that socket instead.

#include "cq/bus/schema.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cq::bus::local_wire {

/// How `<config>/local` names such a socket: `unix://PATH`.
inline constexpr std::string_view scheme = "unix://";
inline constexpr std::size_t header_bytes = 4;
/// The first byte of a ZeroMQ greeting (ZMTP 3's signature).
inline constexpr unsigned char zmtp_signature = 0xFF;

/// `frame` with its length before it.
inline std::string framed(std::string_view frame) {
  std::string out;
  out.reserve(header_bytes + frame.size());
  auto n = static_cast<std::uint32_t>(frame.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xFF));
  out.append(frame);
  return out;
}

/// The length the first header_bytes of `buf` announce (buf holds at least
/// that many); nullopt when it is 0 or above the frame limit.
inline std::optional<std::size_t> announced(std::string_view buf) {
  std::uint32_t n = 0;
  for (std::size_t i = 0; i < header_bytes; ++i)
    n = (n << 8) | static_cast<unsigned char>(buf[i]);
  if (n == 0 || n > limits::frame_bytes)
    return std::nullopt;
  return n;
}

} // namespace cq::bus::local_wire
