#pragma once
// Starting workloads (cq/node/launcher.hpp has the request and the contract
// a launched child keeps), for both platforms' process hosts. launcher.cpp is
// the only file that includes Boost.Process (its header alone costs seconds
// of compile time).

#include "cq/node/files.hpp"
#include "cq/node/launcher.hpp"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cq::node {

/// Resolves argv[0] the way execvp would, but against `path_var` (the job's
/// PATH) rather than the daemon's: a name with a slash is taken as is (relative
/// to `cwd`), a bare name is looked up in each PATH entry (an empty or relative
/// entry is relative to `cwd`). Returns the path to exec, or errc::not_found.
bus::result<std::string> resolve_program(const std::string& argv0, std::string_view path_var,
                                         const std::string& cwd);

/// Validates `req` and starts the child. On failure nothing is left running
/// (a child that failed before exec is reaped) and the error says why in one
/// line: errc::invalid_argument for a bad request (empty argv, NUL bytes, bad
/// env name, relative or missing cwd), errc::not_found for an unknown program,
/// errc::internal for a system failure (fork, exec, pidfd_open...).
bus::result<launched_child> launch(const launch_request& req);

/// posix_spawn of `exe` (cq-shim) with launcher.hpp's child contract through
/// spawn attributes and file actions: its own process group, every signal
/// at its default and none blocked, `in_fd` as stdin, `out_fd` as stdout and
/// stderr, each `extra_fds` (fd, number in the child) in place, nothing else
/// open, in `cwd`. The pid, or errno's error. Where glibc has the spawn
/// actions it needs (2.34) only: the launcher's and the standby pool's.
bus::result<pid_t> spawn_shim(const std::string& exe, const std::vector<std::string>& args,
                              const bus::env_map& env, int in_fd, int out_fd, const char* cwd,
                              const std::vector<std::pair<int, int>>& extra_fds);

/// process_host::write_terminal for both platforms: one non-blocking write
/// into the FIFO.
status write_terminal_fifo(const std::filesystem::path& fifo, std::string_view frames);

} // namespace cq::node
