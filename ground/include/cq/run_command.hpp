#pragma once
// Runs a service manager's command for the install commands of cq-node and
// cq-coordinator (systemctl, launchctl): echoed, waited for.

#include <string>
#include <vector>

namespace cq {

/// Runs `argv` (argv[0] looked up in PATH) after printing it to stderr as
/// "<program>: running ...", and waits for it; its exit code, 128 + the
/// signal that ended it, or 127 when it could not start.
int run_command(const std::string& program, const std::vector<std::string>& argv);

/// Whether systemd is this machine's init (/run/systemd/system exists).
bool systemd_runs();

} // namespace cq
