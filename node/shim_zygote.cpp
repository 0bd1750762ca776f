// cq-shim --standby-zygote SOCKET_FD: forks standby cq-shims for cq-node (docs/adr/
// 0060). A standby started by posix_spawn costs cq-node a fork and an exec
// of cq-shim, and the exec (loading the program, its libc's start-up, the
// page faults of a new address space) is the larger part. The zygote is
// exec'ed once; each standby is then a fork of it, already running cq-shim.
//
// The request (standby_wire.hpp, zygote_request) is one byte carrying two
// descriptors: the standby's cgroup procs file and its socket. The zygote
// forks with CLONE_PARENT, so the standby is cq-node's child exactly as a
// spawned one is (cq-node reaps it, and its pid cannot be reused before
// that), in a process group of its own, with the two descriptors as 3 and
// 4, /dev/null as 0, 1 and 2 (the zygote's own), "/" as its directory, every
// signal at its default and none blocked (the zygote changes none of them),
// and runs standby_main as `cq-shim --standby 3 4` would; its command line
// says so too (it rewrites the zygote's argument strings, which it shares
// until then, in place: `ps` tells a standby, or the job's shim it becomes,
// from the zygote). The zygote answers
// with the standby's pid, or minus errno, as 4 bytes in host order. Its
// socket closing (cq-node gone) ends it; standbys it forked are not its
// children and live on (each ends with its own socket).
//
// The standby is forked with the raw clone system call (glibc has no fork
// with CLONE_PARENT), so glibc's record of the thread id in the child still
// names the zygote's: nothing in the shim may use it (raise() does; the shim
// signals itself with kill(getpid(), ...) instead). libc only, linked
// statically like the rest of the shim.
#include "cq/node/standby_wire.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

int standby_main(int procs_fd, int sock); // shim_standby.cpp

namespace {

/// What a standby's command line says after the program's path (NUL-
/// separated), in place of the zygote's arguments.
constexpr char standby_args[] = "--standby\0"
                                "3\0"
                                "4";

/// The standby's side of the fork: its descriptors as `cq-shim --standby 3 4`
/// has them, its command line saying so, a process group of its own, then
/// standby_main. `args` and `args_size`: the zygote's arguments after the
/// program's path, NUL-separated, in the process's argument area.
[[noreturn]] void become_standby(int procs, int sock, char* args, std::size_t args_size) {
  if (args && args_size >= sizeof standby_args) {
    std::memcpy(args, standby_args, sizeof standby_args); // with its last NUL
    std::memset(args + sizeof standby_args, 0, args_size - sizeof standby_args);
  }
  // Above 4 first, so that neither dup2 below closes the other's source.
  int p = ::fcntl(procs, F_DUPFD, 10), s = ::fcntl(sock, F_DUPFD, 10);
  if (p < 0 || s < 0 || ::dup2(p, 3) < 0 || ::dup2(s, 4) < 0)
    ::_exit(125);           // cq-node sees the socket close before "R": not used
  ::close_range(5, ~0U, 0); // the zygote's socket is gone with fd 3's dup2
  ::setpgid(0, 0);
  ::_exit(standby_main(3, 4));
}

} // namespace

int zygote_main(int sock, int argc, char** argv) {
  // The arguments after the path: contiguous, as the kernel laid them out.
  char* args = argc > 1 ? argv[1] : nullptr;
  std::size_t args_size =
      args ? static_cast<std::size_t>(argv[argc - 1] + std::strlen(argv[argc - 1]) + 1 - args) : 0;
  for (;;) {
    cq::node::standby_wire::zygote_request req;
    ssize_t r;
    do
      r = ::recvmsg(sock, &req.msg, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    if (r <= 0)
      return 0; // cq-node is gone
    // The descriptors that came (the kernel closed any past the room).
    int fds[cq::node::standby_wire::zygote_room];
    std::size_t n = 0;
    auto* c = CMSG_FIRSTHDR(&req.msg);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len >= CMSG_LEN(0)) {
      n = std::min<std::size_t>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int),
                                cq::node::standby_wire::zygote_room);
      std::memcpy(fds, CMSG_DATA(c), n * sizeof(int));
    }
    bool ok = r == 1 && n == std::size_t{cq::node::standby_wire::zygote_fds};
    if (!ok) // none of it stays open here
      for (std::size_t i = 0; i < n; ++i)
        ::close(fds[i]);
    std::int32_t answer = -EPROTO;
    if (ok) {
      long pid = ::syscall(SYS_clone, CLONE_PARENT | SIGCHLD, nullptr, nullptr, nullptr, 0);
      if (pid == 0)
        become_standby(fds[0], fds[1], args, args_size);
      answer = pid > 0 ? static_cast<std::int32_t>(pid) : -errno;
      ::close(fds[0]);
      ::close(fds[1]);
    }
    ssize_t w;
    do
      w = ::write(sock, &answer, sizeof answer);
    while (w < 0 && errno == EINTR);
    if (w != sizeof answer)
      return 0;
  }
}
