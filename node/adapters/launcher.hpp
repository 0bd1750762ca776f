#pragma once
// Starting workloads (cq/node/launcher.hpp has the request and the contract
// a launched child keeps), for both platforms' process hosts. launcher.cpp is
// the only file that includes Boost.Process (its header alone costs seconds
// of compile time).

#include "cq/node/files.hpp"
#include "cq/node/launcher.hpp"

#include <string>
#include <string_view>

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

/// process_host::write_terminal for both platforms: one non-blocking write
/// into the FIFO.
status write_terminal_fifo(const std::filesystem::path& fifo, std::string_view frames);

} // namespace cq::node
