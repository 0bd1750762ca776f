// cq-shim --standby PROCS_FD SOCKET_FD: a shim started ahead of its job
// (docs/adr/0048). It joins the memory cgroup whose procs file is PROCS_FD
// (the migration's wait for an RCU grace period happens now, not on a job's
// start), says so with one byte "R" on SOCKET_FD, and waits there for its
// job: a request of standby_wire.hpp with the descriptors for stdin and
// stdout/stderr. It then takes them, changes to the job's directory, takes
// the job's environment as its own and runs the shim in place with the
// job's arguments (shim_main), as cq-node's launcher would have started it:
// same pid, same process group, same cgroup, and no second exec (ADR 0058).
// Just before, it says "X" on the socket, which is how cq-node learns the
// job was taken; a failure before it is written there as "E" and errno (4
// bytes), and the standby exits 127. The socket closing first (cq-node
// gone) ends the standby. Its /proc entry keeps the standby's command line
// and environment: cq-node records its pid and start time in the
// allocation's alloc.json before the handover, so a restarted cq-node finds
// it there, not by the marker in its environment.
//
// libc only, like the rest of the shim (it is linked statically).
#include "cq/node/standby_wire.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace {

void say_errno(int sock, int err) {
  char msg[1 + sizeof(std::uint32_t)] = {'E'};
  std::uint32_t e = static_cast<std::uint32_t>(err);
  memcpy(msg + 1, &e, sizeof e);
  (void)!::write(sock, msg, sizeof msg);
}

/// Reads exactly `n` bytes; false at EOF or an error.
bool read_all(int fd, char* buf, std::size_t n) {
  while (n > 0) {
    auto r = ::read(fd, buf, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    buf += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

} // namespace

int shim_main(int argc, char** argv); // shim.cpp

int standby_main(int procs_fd, int sock) {
  // Into the group first (the slow part, done while no job waits).
  char num[24];
  int len = snprintf(num, sizeof num, "%ld", static_cast<long>(getpid()));
  ssize_t w;
  do
    w = ::write(procs_fd, num, static_cast<size_t>(len));
  while (w < 0 && errno == EINTR);
  ::close(procs_fd);
  if (w != len)
    return 125; // cq-node sees the socket close before "R": this standby is not used
  if (::write(sock, "R", 1) != 1)
    return 0;
  // The request: its header (with the descriptors), then its payload.
  std::uint32_t size = 0;
  int fds[cq::node::standby_wire::fds] = {-1, -1};
  {
    cq::node::standby_wire::header h;
    ssize_t r;
    do
      r = ::recvmsg(sock, &h.msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    while (r < 0 && errno == EINTR);
    if (r != static_cast<ssize_t>(sizeof h.data))
      return 0; // cq-node is gone
    size = h.data;
    auto* c = CMSG_FIRSTHDR(&h.msg);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
        c->cmsg_len != CMSG_LEN(sizeof fds)) {
      say_errno(sock, EPROTO);
      return 127;
    }
    memcpy(fds, CMSG_DATA(c), sizeof fds);
  }
  if (size == 0 || size > cq::node::standby_wire::max_payload) {
    say_errno(sock, EPROTO);
    return 127;
  }
  char* payload = static_cast<char*>(malloc(size));
  if (!payload || !read_all(sock, payload, size) || payload[size - 1] != '\0') {
    say_errno(sock, payload ? EPROTO : ENOMEM);
    return 127;
  }
  // cwd, argc, argv..., then the environment to the end: NUL-terminated strings.
  char* end = payload + size;
  char* at = payload;
  auto next = [&]() -> char* {
    if (at >= end)
      return nullptr;
    char* s = at;
    at += strlen(at) + 1;
    return s;
  };
  char* cwd = next();
  char* argc_text = next();
  long argc = argc_text ? strtol(argc_text, nullptr, 10) : 0;
  if (!cwd || argc < 1 || argc > 1 << 16) {
    say_errno(sock, EPROTO);
    return 127;
  }
  auto** argv = static_cast<char**>(calloc(static_cast<size_t>(argc) + 1, sizeof(char*)));
  std::size_t envc = 0;
  for (char* p = payload; p < end; p += strlen(p) + 1)
    ++envc; // an upper bound
  auto** envp = static_cast<char**>(calloc(envc + 1, sizeof(char*)));
  if (!argv || !envp) {
    say_errno(sock, ENOMEM);
    return 127;
  }
  for (long i = 0; i < argc; ++i)
    if (!(argv[i] = next())) {
      say_errno(sock, EPROTO);
      return 127;
    }
  std::size_t n = 0;
  while (char* e = next())
    envp[n++] = e;
  // What the launcher's spawn does: stdin, stdout and stderr, the directory.
  if (::dup2(fds[0], 0) < 0 || ::dup2(fds[1], 1) < 0 || ::dup2(fds[1], 2) < 0 ||
      ::chdir(cwd) != 0) {
    say_errno(sock, errno);
    return 127;
  }
  ::close(fds[0]);
  ::close(fds[1]);
  // The shim runs in place, with the job's environment (its workload
  // inherits it, marker included): no second exec (ADR 0058). "X" tells
  // cq-node the job is taken; the socket closes with it.
  environ = envp;
  (void)!::write(sock, "X", 1);
  ::close(sock);
  return shim_main(static_cast<int>(argc), argv);
}
