#pragma once
// What cq-node sends a standby cq-shim (node/shim_standby.cpp, ADR 0048): a
// 4-byte payload size in host order carrying two descriptors (stdin, then
// stdout and stderr), then the payload: NUL-terminated strings, the job's
// working directory, its argument count in decimal, the arguments (the
// first is the program cq-shim execs: cq-shim itself), and the environment
// to the end. The standby answers by closing the socket at its exec, or with
// errno (4 bytes) if anything before the exec failed.

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cq::node::standby_wire {

inline constexpr int fds = 2;
inline constexpr std::uint32_t max_payload = 64u << 20;

/// One message as sendmsg and recvmsg take it: `data` as its bytes, room
/// for `room` descriptors as control. Both sides build it here, so they
/// agree on its layout. Not copyable: `msg` points into it.
template <class Data, int room>
struct with_fds {
  /// The sender's: `n` descriptors (at most `room`) to go with `data`.
  void put_fds(const int* fds, std::size_t n) {
    msg.msg_controllen = n ? CMSG_SPACE(sizeof(int) * n) : 0;
    if (n == 0)
      return;
    auto* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
  }

  Data data{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * room)]{};
  iovec iov{&data, sizeof data};
  msghdr msg{};
  with_fds() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  with_fds(const with_fds&) = delete;
  with_fds& operator=(const with_fds&) = delete;
};

/// The request's header: the payload's size, and the `fds` descriptors.
using header = with_fds<std::uint32_t, fds>;

/// What cq-node sends the zygote (node/shim_zygote.cpp, ADR 0060) for each
/// standby: one byte carrying two descriptors, the standby's cgroup procs
/// file, then its socket (room for more, which are refused). The zygote
/// answers with 4 bytes in host order: the standby's pid, or minus errno.
inline constexpr int zygote_fds = 2;
inline constexpr int zygote_room = 8;
struct zygote_request : with_fds<char, zygote_room> {
  zygote_request() { data = 'F'; }
};

} // namespace cq::node::standby_wire
