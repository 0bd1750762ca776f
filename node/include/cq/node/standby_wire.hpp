#pragma once
// What cq-node sends a standby cq-shim (node/shim_standby.cpp, ADR 0048): a
// 4-byte payload size in host order carrying two descriptors (stdin, then
// stdout and stderr), then the payload: NUL-terminated strings, the job's
// working directory, its argument count in decimal, the arguments (the
// first is the program cq-shim execs: cq-shim itself), and the environment
// to the end. The standby answers by closing the socket at its exec, or with
// errno (4 bytes) if anything before the exec failed.

#include <sys/socket.h>

#include <cstdint>

namespace cq::node::standby_wire {

inline constexpr int fds = 2;
inline constexpr std::uint32_t max_payload = 64u << 20;

/// The request's header, as sendmsg and recvmsg take it: `size` as the data,
/// room for the `fds` descriptors as control. Both sides build it here, so
/// they agree on its layout. Not copyable: `msg` points into it.
struct header {
  std::uint32_t size = 0;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fds)]{};
  iovec iov{&size, sizeof size};
  msghdr msg{};
  header() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  header(const header&) = delete;
  header& operator=(const header&) = delete;
};

/// What cq-node sends the zygote (node/shim_zygote.cpp, ADR 0060) for each
/// standby: one byte carrying two descriptors, the standby's cgroup procs
/// file, then its socket. The zygote answers with 4 bytes in host order: the
/// standby's pid, or minus errno.
inline constexpr int zygote_fds = 2;
struct zygote_request {
  char byte = 'F';
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)]{}; ///< room for more, refused
  iovec iov{&byte, sizeof byte};
  msghdr msg{};
  zygote_request() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  zygote_request(const zygote_request&) = delete;
  zygote_request& operator=(const zygote_request&) = delete;
};

} // namespace cq::node::standby_wire
