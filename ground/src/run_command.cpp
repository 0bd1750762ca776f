// run_command.hpp: fork, exec, wait.
#include "cq/run_command.hpp"

#include <fmt/format.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace cq {

int run_command(const std::string& program, const std::vector<std::string>& argv) {
  if (argv.empty())
    return 127;
  std::string line;
  for (auto& a : argv)
    line += (line.empty() ? "" : " ") + a;
  fmt::print(stderr, "{}: running {}\n", program, line);
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0)
    return 127;
  if (pid == 0) {
    // cq-node --platform posix blocks SIGCHLD in every thread (adapters.hpp:
    // block_child_signal); systemctl and launchctl start with none blocked.
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool systemd_runs() {
  std::error_code ec;
  return std::filesystem::is_directory("/run/systemd/system", ec);
}

} // namespace cq
