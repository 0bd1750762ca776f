// cq-shim: the parent of every workload cq-node starts.
//
//   cq-shim [--as UID GID GROUPS] [--output FILE] STATUS_FILE PROGRAM ARGV0 [ARGS...]
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
// Why a shim (issue 4, restart safety): the exit status of a process can only
// be read by its parent. If cq-node were the workload's parent, a restarted
// cq-node (after a crash or kill -9) could see a re-adopted workload end
// (pidfd polls readable for any process) but never learn its exit code, so
// `cq show` could not say succeeded or failed. The shim stays the workload's
// parent for its whole life and writes the status to STATUS_FILE (atomically:
// STATUS_FILE.tmp, then rename) before exiting, so whichever cq-node process
// runs at that moment reads it from disk. A separate tiny executable (libc
// only) rather than a mode of cq-node itself: exec'ing cq-node would load
// ZeroMQ, spdlog and the rest for every job, in time and in memory; the shim
// costs well under a millisecond and a few hundred kB.
//
// The shim is the leader of the job's process group (cq-node's launcher made
// the group and put the shim in the allocation's cgroup before exec); the
// workload is its only child, in the same group, with the environment the shim
// itself was given. Signals the node sends to the group (SIGTERM on stop or
// timeout) reach the workload directly; the shim ignores the catchable ones so
// that it outlives the workload's grace period, and dies only on SIGKILL.
// After writing the status it ends the same way the workload did (same exit
// code, or the same signal), so its parent sees what the workload did.
//
// STATUS_FILE: "exited CODE MAXRSS_KB\n" or "signaled SIGNAL MAXRSS_KB\n", where
// MAXRSS_KB is the workload's own peak RSS from wait4's rusage.

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
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

} // namespace

int main(int argc, char** argv) {
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
  if (argc < 4) {
    fprintf(stderr, "usage: cq-shim [--as UID GID GROUPS] [--output FILE] STATUS_FILE PROGRAM "
                    "ARGV0 [ARGS...]\n");
    return 125;
  }
  const char* status_file = argv[1];
  const char* program = argv[2];
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
  pid_t pid = fork();
  if (pid < 0) {
    perror("cq-shim: fork");
    write_status(status_file, "exited 125 0\n");
    return 125;
  }
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (output) {
      dup2(pipe_fds[1], 1);
      dup2(pipe_fds[1], 2);
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
    }
    if (run_as && !drop_to(uid, gid, groups, ngroups)) {
      fprintf(stderr, "cq-shim: cannot run as uid %u gid %u: %s\n", static_cast<unsigned>(uid),
              static_cast<unsigned>(gid), strerror(errno));
      _exit(126);
    }
    execv(program, argv + 3);
    fprintf(stderr, "cq-shim: cannot exec %s: %s\n", program, strerror(errno));
    _exit(127);
  }
  if (output) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
  }
  for (int s : forwarded)
    sigaction(s, &ign, nullptr);
  sigprocmask(SIG_SETMASK, &old, nullptr);

  int st = 0;
  struct rusage ru {};
  while (wait4(pid, &st, 0, &ru) < 0) {
    if (errno != EINTR) {
      write_status(status_file, "exited 125 0\n");
      return 125;
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
  raise(sig);
  return 128 + sig;
}
