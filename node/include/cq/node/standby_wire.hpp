#pragma once
// What cq-node sends a standby cq-shim (node/shim_standby.cpp, ADR 0048): a
// 4-byte payload size in host order carrying two descriptors (stdin, then
// stdout and stderr), then the payload: NUL-terminated strings, the job's
// working directory, its argument count in decimal, the arguments (the
// first is the program cq-shim execs: cq-shim itself), and the environment
// to the end. The standby answers by closing the socket at its exec, or with
// errno (4 bytes) if anything before the exec failed.

#include <cstdint>

namespace cq::node::standby_wire {

inline constexpr int fds = 2;
inline constexpr std::uint32_t max_payload = 64u << 20;

} // namespace cq::node::standby_wire
