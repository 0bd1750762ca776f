// clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP) for cq-shim on cgroup v2
// (spawn_into_cgroup.hpp, docs/adr/0050).
//
// glibc 2.36 has no clone3 wrapper, and a child that shares the parent's
// memory cannot return from a plain syscall() on the parent's stack (it
// would overwrite the return address the parent is about to use). So the
// clone is a few lines of assembly, like glibc's own __clone3: the child
// starts on a stack of its own and calls one function, which only makes
// system calls and never returns. x86-64 only; elsewhere `unsupported`.
#include "node/adapters/linux/spawn_into_cgroup.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(SYS_clone3) && defined(SYS_close_range)
#define CQ_CLONE3_VM 1
// long cq_clone3_vm(clone_args*, size, int (*fn)(void*), void* arg): in the
// parent the child's pid or -errno; the child runs fn(arg) on the stack the
// arguments give it and exits with its result. rdx and r8 survive the
// syscall instruction (it clobbers rcx and r11).
asm(R"(
  .pushsection .text
  .globl cq_clone3_vm
  .hidden cq_clone3_vm
  .type cq_clone3_vm,@function
cq_clone3_vm:
  .cfi_startproc
  mov %rcx, %r8
  mov $435, %eax
  syscall
  test %rax, %rax
  jz 1f
  ret
1:
  .cfi_undefined rip
  xor %ebp, %ebp
  and $-16, %rsp
  mov %r8, %rdi
  call *%rdx
  mov %rax, %rdi
  mov $60, %eax
  syscall
  hlt
  .cfi_endproc
  .size cq_clone3_vm, .-cq_clone3_vm
  .popsection
)");
extern "C" long cq_clone3_vm(void* args, std::size_t size, int (*fn)(void*), void* arg);
#else
#define CQ_CLONE3_VM 0
#endif

namespace cq::node {

namespace {

#if CQ_CLONE3_VM
constexpr std::uint64_t clone_vm = 0x00000100, clone_vfork = 0x00004000,
                        clone_into_cgroup = 0x200000000ULL;

/// The kernel's struct clone_args as of Linux 5.7 (CLONE_ARGS_SIZE_VER2).
struct clone_args_v2 {
  std::uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
      set_tid_size, cgroup;
};

/// The kernel's sigaction on x86-64 (rt_sigaction takes it, not libc's).
struct kernel_sigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  std::uint64_t mask;
};

/// A system call without the C library: no lazy symbol binding, no errno
/// and no sanitizer interceptor in the child, which shares the daemon's
/// memory. The result, or -errno.
inline long raw_syscall(long n, long a = 0, long b = 0, long c = 0, long d = 0) {
  long ret;
  register long r10 asm("r10") = d;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
               : "rcx", "r11", "memory");
  return ret;
}

/// What the child does, read from the memory it shares with the parent.
struct plan {
  const char* exe;
  char* const* argv;
  char* const* envp;
  int in_fd, out_fd;
  const char* cwd;
  int failed = 0; ///< errno of the step that failed (the child writes it)
};

/// The child, between clone and exec: raw system calls only, and never a
/// return (it exits), so nothing it leaves on its stack matters.
__attribute__((no_sanitize("address", "thread", "undefined"))) int child_main(void* p) {
  auto* c = static_cast<plan*>(p);
  // Every signal at its default before anything is unblocked: a handler of
  // the daemon's must never run here, on memory the daemon owns. glibc's
  // own two (32 and 33) too.
  kernel_sigaction dfl{SIG_DFL, 0, nullptr, 0};
  for (long sig = 1; sig <= 64; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP)
      raw_syscall(SYS_rt_sigaction, sig, reinterpret_cast<long>(&dfl), 0, sizeof(std::uint64_t));
  std::uint64_t none = 0;
  long r = raw_syscall(SYS_setpgid, 0, 0);
  // stdin, stdout and stderr. A descriptor given as 0, 1 or 2 (the daemon
  // started with one closed) first moves above them: dup2 onto itself would
  // keep its close-on-exec, and stdin's could overwrite the log.
  long in = c->in_fd, out = c->out_fd;
  if (r >= 0 && in < 3)
    r = in = raw_syscall(SYS_fcntl, in, F_DUPFD_CLOEXEC, 3);
  if (r >= 0 && out < 3)
    r = out = raw_syscall(SYS_fcntl, out, F_DUPFD_CLOEXEC, 3);
  if (r >= 0)
    r = raw_syscall(SYS_dup2, in, 0);
  if (r >= 0)
    r = raw_syscall(SYS_dup2, out, 1);
  if (r >= 0)
    r = raw_syscall(SYS_dup2, out, 2);
  // Nothing else open after the exec (close_range, Linux 5.9: the parent
  // checked that it is there).
  if (r >= 0)
    r = raw_syscall(SYS_close_range, 3, ~0U, 0);
  if (r >= 0)
    r = raw_syscall(SYS_chdir, reinterpret_cast<long>(c->cwd));
  if (r >= 0) {
    raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&none), 0, sizeof none);
    r = raw_syscall(SYS_execve, reinterpret_cast<long>(c->exe), reinterpret_cast<long>(c->argv),
                    reinterpret_cast<long>(c->envp));
  }
  c->failed = static_cast<int>(-r);
  raw_syscall(SYS_exit, 127);
  return 127;
}

/// Set once the kernel said it has no clone3, no CLONE_INTO_CGROUP or no
/// close_range: every later start goes the other way without asking.
std::atomic<bool> kernel_cannot{false};
#endif

} // namespace

spawned_into_cgroup spawn_into_cgroup(const std::string& exe, const std::vector<std::string>& args,
                                      const std::vector<std::string>& env, int in_fd, int out_fd,
                                      const char* cwd, int cgroup_fd) {
  spawned_into_cgroup out;
#if !CQ_CLONE3_VM
  (void)exe, (void)args, (void)env, (void)in_fd, (void)out_fd, (void)cwd, (void)cgroup_fd;
  out.unsupported = true;
  return out;
#else
  if (kernel_cannot.load(std::memory_order_relaxed)) {
    out.unsupported = true;
    out.error = ENOSYS;
    return out;
  }
  // close_range arrived in 5.9, CLONE_INTO_CGROUP in 5.7: between them the
  // child could not close the daemon's descriptors in one call.
  static const bool has_close_range = raw_syscall(SYS_close_range, ~0U, ~0U, 0) == 0;
  if (!has_close_range) {
    kernel_cannot = true;
    out.unsupported = true;
    out.error = ENOSYS;
    return out;
  }
  std::vector<char*> argv, envp;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // The child's stack, a guard page below it. Touched here, so that its
  // pages are the daemon's, not charged to the job's group.
  constexpr std::size_t page = 4096, stack_bytes = 16 * 1024;
  void* map = ::mmap(nullptr, page + stack_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (map == MAP_FAILED) {
    out.error = errno;
    return out;
  }
  ::mprotect(map, page, PROT_NONE);
  auto* stack = static_cast<char*>(map) + page;
  std::memset(stack, 0, stack_bytes);
  plan p{exe.c_str(), argv.data(), envp.data(), in_fd, out_fd, cwd};
  clone_args_v2 a{};
  a.flags = clone_vm | clone_vfork | clone_into_cgroup;
  a.exit_signal = SIGCHLD;
  a.stack = reinterpret_cast<std::uintptr_t>(stack);
  a.stack_size = stack_bytes;
  a.cgroup = static_cast<std::uint64_t>(cgroup_fd);
  // Every signal blocked in this thread across the clone (the child starts
  // with the mask), glibc's own included: by the system call.
  std::uint64_t all = ~std::uint64_t{0}, old = 0;
  raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&all),
              reinterpret_cast<long>(&old), sizeof all);
  long pid = cq_clone3_vm(&a, sizeof a, child_main, &p);
  raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&old), 0, sizeof old);
  ::munmap(map, page + stack_bytes);
  if (pid < 0) {
    // No clone3 (ENOSYS) or no CLONE_INTO_CGROUP (E2BIG, EINVAL): never
    // asked again. Another refusal (a group the kernel will not put a
    // process in): the caller joins the group the other way, which says
    // what is wrong with it.
    out.unsupported = true;
    out.error = static_cast<int>(-pid);
    if (out.error == ENOSYS || out.error == E2BIG || out.error == EINVAL)
      kernel_cannot = true;
    return out;
  }
  // CLONE_VFORK: the child has exec'ed or exited by now.
  if (p.failed != 0) {
    int st = 0;
    while (::waitpid(static_cast<pid_t>(pid), &st, 0) < 0 && errno == EINTR) {
    }
    out.error = p.failed;
    return out;
  }
  out.pid = static_cast<pid_t>(pid);
  return out;
#endif
}

} // namespace cq::node
