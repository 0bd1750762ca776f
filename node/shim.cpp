// cq-shim: the parent of every workload cq-node starts.
//
//   cq-shim [--cgroup-procs FD] [--as UID GID GROUPS] [--output FILE | --pty FIFO]
//           STATUS_FILE PROGRAM ARGV0 [ARGS...]
//   cq-shim --standby PROCS_FD SOCKET_FD   (started ahead: shim_standby.cpp)
//   cq-shim --standby-zygote SOCKET_FD     (forks standbys: shim_zygote.cpp)
//
// --cgroup-procs (cq-node's launcher, where it starts the shim with
// posix_spawn): FD is the allocation's memory cgroup's procs file. The shim
// writes its own pid there and closes it first of all, so that it and the
// workload run inside the cgroup from the workload's first instruction; the
// migration (an RCU grace period on cgroup v1) is waited for here, not by the
// node's launching thread. A failed write ends the shim with 125 (said in
// output.log and the status file) before the workload starts.
//
// --as (run-as, SPEC section 6): the workload drops to that user before exec:
// supplementary groups (GROUPS: comma-separated gids, or -), then the gid,
// then the uid; a step that fails ends the workload with 126 before exec.
// The shim itself stays root, so the status file is written as before.
//
// --output (cq submit --output PATTERN, expanded by the node): the workload's
// stdout and stderr go into a pipe, and a copier (a second child of the shim,
// in the same group and cgroup) writes what comes out of it both to the
// shim's own stdout (the allocation's output.log, which cq logs reads) and to
// FILE, opened for appending as the workload's user (after the same drop as
// the workload's under --as): the node never opens a path a job chose, so a
// job cannot make a root daemon write where its user could not. A FILE that
// cannot be opened is said once in output.log, and the output still goes
// there. The copier ignores the signals the shim ignores, so it drains what
// the workload wrote during its grace period; after the workload ends the
// shim waits for the copier (up to 2 s: a child the workload left running
// may hold the pipe) before it exits, so output.log is complete when the
// node learns of the end.
//
// --pty (cq run --pty): the workload gets a terminal. The shim opens a
// pseudo-terminal; the workload starts a session of its own (setsid) with the
// terminal as its controlling terminal and its stdin, stdout and stderr (the
// terminal is given to the workload's user under --as). The shim copies what
// the terminal shows to its own stdout (output.log: cq run and cq logs read
// it) and what the node writes into FIFO (frames of terminal_frame.hpp: typed
// keys, window sizes) to the terminal. The workload's session is no longer
// the job's process group, so the shim passes the signals the node sends the
// group on to the workload's group and to the terminal's foreground group; a
// SIGTERM is preceded by a SIGHUP, the terminal hanging up, which interactive
// shells (they ignore SIGTERM) end on. Should the shim itself be killed, the
// terminal closes and the kernel hangs up the session; cq-node's cleanup scan
// finds whatever is left (its processes carry CQ_ALLOCATION_ID).
//
// Why a shim (issue 4, restart safety): the exit status of a process can only
// be read by its parent. If cq-node were the workload's parent, a restarted
// cq-node (after a crash or kill -9) could see a re-adopted workload end
// (pidfd polls readable for any process) but never learn its exit code, so
// `cq show` could not say succeeded or failed. The shim stays the workload's
// parent for its whole life and writes the status to STATUS_FILE (atomically:
// STATUS_FILE.tmp, then rename) before exiting, so whichever cq-node process
// runs at that moment reads it from disk. A separate tiny executable (libc
// only, and linked statically where the C library allows: no dynamic loader
// runs per job) rather than a mode of cq-node itself: exec'ing cq-node would
// load ZeroMQ, spdlog and the rest for every job, in time and in memory; the
// shim costs well under a millisecond and a few hundred kB.
//
// The shim is the leader of the job's process group (cq-node's launcher made
// the group; the shim is in the allocation's cgroup before the workload
// starts, put there by the launcher or by --cgroup-procs); the
// workload is its only child, in the same group, with the environment the shim
// itself was given. Signals the node sends to the group (SIGTERM on stop or
// timeout) reach the workload directly; the shim ignores the catchable ones so
// that it outlives the workload's grace period, and dies only on SIGKILL.
// After writing the status it ends the same way the workload did (same exit
// code, or the same signal), so its parent sees what the workload did.
//
// STATUS_FILE: "exited CODE MAXRSS_KB\n" or "signaled SIGNAL MAXRSS_KB\n", where
// MAXRSS_KB is the workload's own peak RSS from wait4's rusage.

#include "cq/node/terminal_frame.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace {

void write_status(const char* file, const char* text) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", file) >= static_cast<int>(sizeof tmp))
    return;
  int fd = ::open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  auto len = strlen(text);
  bool ok = ::write(fd, text, len) == static_cast<ssize_t>(len);
  ok = ::fsync(fd) == 0 && ok;
  ::close(fd);
  if (ok)
    ::rename(tmp, file);
}

constexpr int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM};

/// Parses "--as UID GID GROUPS"; false on a malformed value.
bool parse_as(char** v, uid_t& uid, gid_t& gid, gid_t* groups, int& ngroups, int max) {
  char* end = nullptr;
  uid = static_cast<uid_t>(strtoul(v[0], &end, 10));
  if (*v[0] == '\0' || *end != '\0')
    return false;
  gid = static_cast<gid_t>(strtoul(v[1], &end, 10));
  if (*v[1] == '\0' || *end != '\0')
    return false;
  ngroups = 0;
  if (strcmp(v[2], "-") == 0)
    return true;
  for (char* p = v[2]; *p;) {
    if (ngroups == max)
      return false;
    groups[ngroups++] = static_cast<gid_t>(strtoul(p, &end, 10));
    if (end == p || (*end != ',' && *end != '\0'))
      return false;
    p = *end == ',' ? end + 1 : end;
  }
  return true;
}

/// The run-as drop (groups, then the gid, then the uid, each giving up the
/// right to the earlier ones); false, with errno, when a step fails or uid 0
/// could be regained.
bool drop_to(uid_t uid, gid_t gid, const gid_t* groups, int ngroups) {
  if (setgroups(static_cast<size_t>(ngroups), groups) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
    return false;
  if (uid != 0 && setuid(0) == 0) { // the drop must be for good
    errno = EPERM;
    return false;
  }
  return true;
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    auto w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

/// The copier of --output: `in` to stdout and to `file` until every writer
/// of the pipe has closed it.
[[noreturn]] void copy_output(int in, const char* file) {
  int out = ::open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
  if (out < 0)
    dprintf(1, "cq-shim: --output %s: %s; the output is only in cq logs\n", file, strerror(errno));
  char buf[65536];
  for (;;) {
    auto n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    write_all(1, buf, static_cast<size_t>(n));
    if (out >= 0 && !write_all(out, buf, static_cast<size_t>(n))) {
      dprintf(1, "cq-shim: --output %s: %s; the rest of the output is only in cq logs\n", file,
              strerror(errno));
      ::close(out);
      out = -1;
    }
  }
  _exit(0);
}

/// Waits up to about `ms` for child `pid` to end; true once it has.
bool reap_within(pid_t pid, int ms) {
  for (int waited = 0;; waited += 10) {
    int st = 0;
    auto r = waitpid(pid, &st, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR))
      return true;
    if (waited >= ms)
      return false;
    struct timespec ten_ms {
      0, 10 * 1000 * 1000
    };
    nanosleep(&ten_ms, nullptr);
  }
}

volatile sig_atomic_t pending_signals = 0; // --pty: a bit per forwarded signal

extern "C" void note_signal(int sig) {
  for (unsigned i = 0; i < sizeof forwarded / sizeof forwarded[0]; ++i)
    if (forwarded[i] == sig)
      pending_signals = pending_signals | (1 << i);
}

/// --pty: the terminal's master side and the name of the workload's side.
struct terminal {
  int master = -1;
  char name[128] = {};
};

/// Opens the terminal (given to `uid` under --as) at 24x80 until the node
/// says the window's size; false, with a line in output.log, on failure.
bool open_terminal(terminal& t, bool run_as, uid_t uid) {
  t.master = posix_openpt(O_RDWR | O_NOCTTY);
  if (t.master < 0 || grantpt(t.master) != 0 || unlockpt(t.master) != 0) {
    dprintf(1, "cq-shim: --pty: cannot open a terminal: %s\n", strerror(errno));
    return false;
  }
  const char* name = ptsname(t.master);
  if (!name || strlen(name) >= sizeof t.name) {
    dprintf(1, "cq-shim: --pty: the terminal has no name\n");
    return false;
  }
  strcpy(t.name, name);
  if (run_as && chown(t.name, uid, static_cast<gid_t>(-1)) != 0) {
    dprintf(1, "cq-shim: --pty: cannot give %s to uid %u: %s\n", t.name, static_cast<unsigned>(uid),
            strerror(errno));
    return false;
  }
  fcntl(t.master, F_SETFD, FD_CLOEXEC);
  fcntl(t.master, F_SETFL, fcntl(t.master, F_GETFL) | O_NONBLOCK);
  struct winsize ws {};
  ws.ws_row = 24;
  ws.ws_col = 80;
  ioctl(t.master, TIOCSWINSZ, &ws);
  return true;
}

/// In the workload's child: a session of its own, the terminal as its
/// controlling terminal and its stdin, stdout and stderr.
void attach_terminal(const terminal& t) {
  setsid();
  int fd = ::open(t.name, O_RDWR);
  if (fd < 0) {
    dprintf(2, "cq-shim: --pty: cannot open %s: %s\n", t.name, strerror(errno));
    _exit(126);
  }
  ioctl(fd, TIOCSCTTY, 0);
  dup2(fd, 0), dup2(fd, 1), dup2(fd, 2);
  if (fd > 2)
    ::close(fd);
}

/// Applies the complete frames at the front of `in` (terminal_frame.hpp):
/// data is queued for the terminal in `out`, a window size set at once.
/// Returns how many bytes of `in` were used.
size_t apply_frames(const char* in, size_t n, int master, char* out, size_t& out_len,
                    size_t out_cap) {
  size_t used = 0;
  while (n - used >= cq::node::terminal_header) {
    auto* f = reinterpret_cast<const unsigned char*>(in + used);
    size_t len = (static_cast<size_t>(f[1]) << 8) | f[2];
    if (n - used < cq::node::terminal_header + len)
      break;
    const unsigned char* body = f + cq::node::terminal_header;
    if (f[0] == cq::node::terminal_data) {
      if (out_cap - out_len < len)
        break; // the terminal is not reading: this frame waits
      memcpy(out + out_len, body, len);
      out_len += len;
    } else if (f[0] == cq::node::terminal_window && len == 4) {
      struct winsize ws {};
      ws.ws_row = static_cast<unsigned short>((body[0] << 8) | body[1]);
      ws.ws_col = static_cast<unsigned short>((body[2] << 8) | body[3]);
      ioctl(master, TIOCSWINSZ, &ws); // the kernel sends SIGWINCH
    }                                 // an unknown kind is skipped
    used += cq::node::terminal_header + len;
  }
  return used;
}

/// Forwards the signals noted since the last call to the workload's group
/// and the terminal's foreground group (a SIGTERM after a SIGHUP).
void forward_noted(pid_t workload, int master) {
  sig_atomic_t noted = pending_signals;
  if (noted == 0)
    return;
  pending_signals = 0;
  pid_t fg = tcgetpgrp(master);
  for (unsigned i = 0; i < sizeof forwarded / sizeof forwarded[0]; ++i) {
    if (!(noted & (1 << i)))
      continue;
    int sig = forwarded[i];
    for (int s : {SIGHUP, sig}) {
      if (s == SIGHUP && sig != SIGTERM && sig != SIGHUP)
        continue;
      kill(-workload, s);
      if (fg > 0 && fg != workload)
        kill(-fg, s);
      if (s == sig)
        break;
    }
  }
}

/// --pty: copies between the terminal, output.log and the FIFO until the
/// workload ends; its wait status and rusage, or false when it cannot be
/// waited for.
bool relay_terminal(pid_t pid, int master, int fifo, int& st, struct rusage& ru) {
  bool reaped = false;
  static char typed[65536];
  size_t typed_len = 0;
  static char frames[8192];
  size_t frames_len = 0;
  char buf[65536];
  bool master_open = true;
  for (;;) {
    forward_noted(pid, master);
    auto r = wait4(pid, &st, WNOHANG, &ru);
    if (r == pid) {
      reaped = true;
      break;
    }
    if (r < 0 && errno != EINTR)
      break;
    struct pollfd p[2] = {{master, 0, 0}, {fifo, POLLIN, 0}};
    if (master_open)
      p[0].events = static_cast<short>(POLLIN | (typed_len > 0 ? POLLOUT : 0));
    else
      p[0].fd = -1;
    if (frames_len == sizeof frames)
      p[1].fd = -1; // full of frames the terminal cannot take yet
    if (poll(p, 2, 50) < 0)
      continue;
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      auto n = ::read(master, buf, sizeof buf);
      if (n > 0)
        write_all(1, buf, static_cast<size_t>(n));
      else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        master_open = false; // EIO: nothing holds the workload's side now
    }
    if (master_open && typed_len > 0 && (p[0].revents & POLLOUT)) {
      auto n = ::write(master, typed, typed_len);
      if (n > 0) {
        memmove(typed, typed + n, typed_len - static_cast<size_t>(n));
        typed_len -= static_cast<size_t>(n);
      }
    }
    if (p[1].revents & POLLIN) {
      auto n = ::read(fifo, frames + frames_len, sizeof frames - frames_len);
      if (n > 0)
        frames_len += static_cast<size_t>(n);
    }
    if (frames_len > 0) {
      auto used = apply_frames(frames, frames_len, master, typed, typed_len, sizeof typed);
      memmove(frames, frames + used, frames_len - used);
      frames_len -= used;
    }
  }
  // What the workload wrote last, then hang up whatever it left behind.
  for (int rounds = 0; master_open && rounds < 64; ++rounds) {
    auto n = ::read(master, buf, sizeof buf);
    if (n <= 0)
      break;
    write_all(1, buf, static_cast<size_t>(n));
  }
  ::close(master);
  return reaped;
}

/// What the workload's child needs (spawn_workload).
struct workload {
  const sigset_t* mask; ///< the signal mask to restore
  const terminal* term; ///< --pty: the terminal to attach; null without
  bool output;          ///< --output: stdout and stderr to the pipe
  int pipe_read, pipe_write;
  bool run_as;
  uid_t uid;
  gid_t gid;
  const gid_t* groups;
  int ngroups;
  const char* program;
  char** argv;
};

/// The child's part: system calls only (and dprintf on a failure), no
/// memory of the shim's changed, exec or _exit at the end.
[[noreturn]] void run_workload(const workload& w) {
  sigprocmask(SIG_SETMASK, w.mask, nullptr);
  if (w.term)
    attach_terminal(*w.term);
  if (w.output) {
    dup2(w.pipe_write, 1);
    dup2(w.pipe_write, 2);
    ::close(w.pipe_read);
    ::close(w.pipe_write);
  }
  if (w.run_as && !drop_to(w.uid, w.gid, w.groups, w.ngroups)) {
    dprintf(2, "cq-shim: cannot run as uid %u gid %u: %s\n", static_cast<unsigned>(w.uid),
            static_cast<unsigned>(w.gid), strerror(errno));
    _exit(126);
  }
  execv(w.program, w.argv);
  dprintf(2, "cq-shim: cannot exec %s: %s\n", w.program, strerror(errno));
  _exit(127);
}

/// Starts the workload: vfork, so the child shares the shim's memory until
/// its exec (the shim waits meanwhile) and no page tables are copied or
/// pages copied on write (a fork here cost 0.6-0.9 ms more per job on a VM).
/// In a frame of its own: nothing of the caller's lives across the vfork.
pid_t spawn_workload(const workload& w) {
  pid_t pid = vfork();
  if (pid == 0)
    run_workload(w);
  return pid;
}

} // namespace

/// --cgroup-procs: this process into the cgroup whose procs file is `fd`.
static bool join_cgroup(int fd) {
  char num[24];
  int len = snprintf(num, sizeof num, "%ld", static_cast<long>(getpid()));
  ssize_t w;
  do
    w = ::write(fd, num, static_cast<size_t>(len));
  while (w < 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  errno = err;
  return w == len;
}

int standby_main(int procs_fd, int sock);         // shim_standby.cpp
int zygote_main(int sock, int argc, char** argv); // shim_zygote.cpp
int shim_main(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--standby-zygote") == 0) {
    long sock = strtol(argv[2], nullptr, 10);
    if (sock < 3 || sock > 1024) {
      fprintf(stderr, "cq-shim: --standby-zygote SOCKET_FD: malformed\n");
      return 125;
    }
    return zygote_main(static_cast<int>(sock), argc, argv);
  }
  if (argc == 4 && strcmp(argv[1], "--standby") == 0) {
    long procs = strtol(argv[2], nullptr, 10), sock = strtol(argv[3], nullptr, 10);
    if (procs < 3 || procs > 1024 || sock < 3 || sock > 1024 || procs == sock) {
      fprintf(stderr, "cq-shim: --standby PROCS_FD SOCKET_FD: malformed\n");
      return 125;
    }
    return standby_main(static_cast<int>(procs), static_cast<int>(sock));
  }
  return shim_main(argc, argv);
}

/// The shim proper, from main() or from a standby that was handed its job
/// (shim_standby.cpp: it runs this in place, with the job's environment).
int shim_main(int argc, char** argv) {
  if (argc > 2 && strcmp(argv[1], "--started") == 0) {
    // Exec'ed by a standby of an earlier cq-shim (a node upgraded while its
    // standbys waited): say so, and keep nothing of it.
    long fd = strtol(argv[2], nullptr, 10);
    if (fd >= 3 && fd <= 1024) {
      (void)!::write(static_cast<int>(fd), "X", 1);
      ::close(static_cast<int>(fd));
    }
    argv += 2;
    argc -= 2;
  }
  int cgroup_error = 0; // --cgroup-procs: why the join failed
  if (argc > 2 && strcmp(argv[1], "--cgroup-procs") == 0) {
    char* end = nullptr;
    long fd = strtol(argv[2], &end, 10);
    if (*argv[2] == '\0' || *end != '\0' || fd < 3 || fd > 1024) {
      fprintf(stderr, "cq-shim: --cgroup-procs FD: malformed\n");
      return 125;
    }
    if (!join_cgroup(static_cast<int>(fd)))
      cgroup_error = errno ? errno : EIO;
    argv += 2;
    argc -= 2;
  }
  bool run_as = false;
  uid_t uid = 0;
  gid_t gid = 0;
  gid_t groups[256];
  int ngroups = 0;
  if (argc > 1 && strcmp(argv[1], "--as") == 0) {
    if (argc < 5 || !parse_as(argv + 2, uid, gid, groups, ngroups, 256)) {
      fprintf(stderr, "cq-shim: --as UID GID GROUPS: malformed\n");
      return 125;
    }
    run_as = true;
    argv += 4;
    argc -= 4;
  }
  const char* output = nullptr;
  if (argc > 2 && strcmp(argv[1], "--output") == 0) {
    output = argv[2];
    argv += 2;
    argc -= 2;
  }
  const char* pty_fifo = nullptr;
  if (argc > 2 && strcmp(argv[1], "--pty") == 0 && !output) {
    pty_fifo = argv[2];
    argv += 2;
    argc -= 2;
  }
  if (argc < 4) {
    fprintf(stderr, "usage: cq-shim [--cgroup-procs FD] [--as UID GID GROUPS] [--output FILE | "
                    "--pty FIFO] STATUS_FILE PROGRAM ARGV0 [ARGS...]\n");
    return 125;
  }
  const char* status_file = argv[1];
  const char* program = argv[2];
  if (cgroup_error) {
    dprintf(1, "cq-shim: cannot join the job's memory cgroup: %s; the workload was not started\n",
            strerror(cgroup_error));
    write_status(status_file, "exited 125 0\n");
    return 125;
  }
  // --pty: the FIFO read and write (so it never reads as ended between two
  // writers), and the terminal, before the workload starts.
  terminal term;
  int fifo = -1;
  if (pty_fifo) {
    fifo = ::open(pty_fifo, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fifo < 0)
      dprintf(1, "cq-shim: --pty %s: %s\n", pty_fifo, strerror(errno));
    if (fifo < 0 || !open_terminal(term, run_as, uid)) {
      write_status(status_file, "exited 125 0\n");
      return 125;
    }
  }
  // Block the signals we are about to ignore, so that none arrives between the
  // fork and the parent's sigaction (it would kill the shim early).
  sigset_t block, old;
  sigemptyset(&block);
  for (int s : forwarded)
    sigaddset(&block, s);
  sigprocmask(SIG_BLOCK, &block, &old);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  // --output: the copier first, so that it reads from the workload's first byte.
  int pipe_fds[2] = {-1, -1};
  pid_t copier = -1;
  if (output) {
    if (::pipe(pipe_fds) != 0) {
      perror("cq-shim: pipe");
      write_status(status_file, "exited 125 0\n");
      return 125;
    }
    copier = fork();
    if (copier < 0) {
      perror("cq-shim: fork");
      write_status(status_file, "exited 125 0\n");
      return 125;
    }
    if (copier == 0) {
      for (int s : forwarded)
        sigaction(s, &ign, nullptr);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      ::close(pipe_fds[1]);
      if (run_as && !drop_to(uid, gid, groups, ngroups)) {
        dprintf(1, "cq-shim: --output: cannot run as uid %u: %s\n", static_cast<unsigned>(uid),
                strerror(errno));
        output = "/dev/null";
      }
      copy_output(pipe_fds[0], output);
    }
  }
  workload w{&old,
             pty_fifo ? &term : nullptr,
             output != nullptr,
             pipe_fds[0],
             pipe_fds[1],
             run_as,
             uid,
             gid,
             groups,
             ngroups,
             program,
             argv + 3};
  pid_t pid = spawn_workload(w);
  if (pid < 0) {
    perror("cq-shim: vfork");
    write_status(status_file, "exited 125 0\n");
    return 125;
  }
  if (output) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
  }
  // --pty: the workload's session does not get the group's signals; the
  // shim notes them and passes them on (forward_noted).
  struct sigaction note {};
  note.sa_handler = note_signal;
  sigemptyset(&note.sa_mask);
  for (int s : forwarded)
    sigaction(s, pty_fifo ? &note : &ign, nullptr);
  sigprocmask(SIG_SETMASK, &old, nullptr);

  int st = 0;
  struct rusage ru {};
  if (pty_fifo) {
    if (!relay_terminal(pid, term.master, fifo, st, ru)) {
      write_status(status_file, "exited 125 0\n");
      return 125;
    }
  } else {
    while (wait4(pid, &st, 0, &ru) < 0) {
      if (errno != EINTR) {
        write_status(status_file, "exited 125 0\n");
        return 125;
      }
    }
  }
  char text[128];
  long maxrss = ru.ru_maxrss;
  if (WIFEXITED(st))
    snprintf(text, sizeof text, "exited %d %ld\n", WEXITSTATUS(st), maxrss);
  else
    snprintf(text, sizeof text, "signaled %d %ld\n", WTERMSIG(st), maxrss);
  if (copier > 0)
    reap_within(copier, 2000); // the rest of the output, before the node learns of the end
  write_status(status_file, text);
  if (WIFEXITED(st))
    return WEXITSTATUS(st);
  // End on the same signal (without a core file of the shim).
  int sig = WTERMSIG(st);
  struct rlimit no_core {
    0, 0
  };
  setrlimit(RLIMIT_CORE, &no_core);
  signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  sigprocmask(SIG_UNBLOCK, &one, nullptr);
  // To the process, not through raise(): a standby forked by the zygote
  // keeps the zygote's thread id in glibc's records (shim_zygote.cpp).
  kill(getpid(), sig);
  return 128 + sig;
}
