#pragma once
// cq run --pty: what the node writes into an allocation's terminal FIFO and
// cq-shim reads from it (node/shim.cpp). A frame is one kind byte, a 16-bit
// big-endian length and that many bytes:
//   'd' LEN BYTES        what was typed, written to the terminal as is;
//   'w' 4 ROWS COLS      the window's size, each 16-bit big-endian.
// The node writes each order's frames with one write of at most
// terminal_write_max bytes, so a frame is never split or interleaved (a pipe
// write of at most PIPE_BUF bytes is atomic; PIPE_BUF is 512 on macOS).
// Plain C++ only: cq-shim includes it too.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cq::node {

inline constexpr char terminal_data = 'd';
inline constexpr char terminal_window = 'w';
inline constexpr std::size_t terminal_header = 3;
inline constexpr std::size_t terminal_write_max = 512;
/// The FIFO's name in the allocation's directory.
inline constexpr const char* terminal_fifo = "terminal";

/// The frames of one terminal order: the window size first (when given),
/// then the data. Empty when there is nothing to send.
inline std::string terminal_frames(std::string_view data, std::uint16_t rows, std::uint16_t cols) {
  std::string out;
  auto put16 = [&](std::size_t v) {
    out += static_cast<char>((v >> 8) & 0xff);
    out += static_cast<char>(v & 0xff);
  };
  if (rows != 0 && cols != 0) {
    out += terminal_window;
    put16(4);
    put16(rows);
    put16(cols);
  }
  if (!data.empty()) {
    out += terminal_data;
    put16(data.size());
    out.append(data);
  }
  return out;
}

} // namespace cq::node
