#pragma once
// The CLI's seam to the operating system: clocks, sleeping, processes, the
// environment. Every clock read, sleep and process spawn of `cq` lives in
// sys.cpp, so the project's lint can allow exactly this file.

#include "cq/bus/protocol.hpp"

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cq::cli::sys {

/// What a `tcp://HOST:PORT` endpoint is before ZeroMQ is given it.
struct tcp_probe {
  /// Why nothing can answer there: HOST does not resolve, or a TCP connect
  /// was refused (or the host or network unreachable) within the timeout.
  /// nullopt when it connected, was slow, or is not a tcp:// endpoint.
  std::optional<std::string> why;
  bool unresolved = false; ///< `why` is about HOST itself: no lookup, or no brackets
  /// The endpoint with HOST replaced by the address it resolved to (ZeroMQ
  /// then makes no lookup of its own); empty when not resolved here.
  std::string endpoint;
};

/// Resolves HOST once and tries a TCP connect to each of its addresses, in
/// order, until one does not refuse. A refusal on loopback, or a name that
/// does not resolve, is known in well under a millisecond, where ZeroMQ
/// would retry quietly until the call's timeout.
tcp_probe probe_tcp(std::string_view endpoint, int timeout_ms);

/// Whether something accepts connections on the Unix socket at `path` now
/// (a socket file left by a coordinator that died refuses at once).
bool unix_socket_accepts(const std::string& path);

/// Lets the heap grow in large steps that the kernel may back with
/// transparent huge pages (its `madvise` mode): a listing of 10,000 jobs
/// touches ~18 MB, and a 4 KiB page fault costs ~11 us on the VMs measured,
/// where one 2 MiB fault maps the same in a few (docs/adr/0036). For commands
/// that read much (a listing); nothing where the C library or kernel has no
/// such knobs.
void heap_in_huge_pages();

/// Whether stdout is a terminal.
bool stdout_is_terminal();

/// Columns to draw tables in: $COLUMNS if set, else the terminal's width on
/// a terminal, else 0 (unlimited: a pipe gets whole lines).
std::size_t terminal_width();

/// The width of the terminal standard error writes to, or 0 when it is not
/// one (a file, a pipe: a message then stays on one line, for grep).
std::size_t stderr_terminal_width();

/// Whether to colour output: stdout is a terminal, NO_COLOR is unset or
/// empty and TERM is not dumb; CLICOLOR_FORCE (nonzero) colours anyway.
bool colour_wanted();

/// Wall clock, milliseconds since the Unix epoch (to compare with job times).
std::int64_t wall_ms();

/// Monotonic clock in milliseconds, for deadlines.
std::int64_t mono_ms();

/// Blocks the calling thread for `ms` milliseconds.
void sleep_ms(std::int64_t ms);

/// Waits up to `timeout_ms` for standard input and appends what it has to
/// `out` (at most 4 KiB at once). False once standard input has ended.
bool read_input(int timeout_ms, std::string& out);

/// The calling process's whole environment.
bus::env_map environment();

/// The current working directory, "" if it cannot be read.
std::string current_dir();

/// Host name of this machine ("localhost" if it cannot be read).
std::string host_name();

/// Login name: $USER, else the passwd entry, else the numeric uid.
std::string user_name();

/// Finds an executable `name`: first beside the running `cq`, then in the
/// build tree's sibling folders (`../coordinator/`, `../node/` relative to
/// `cq`'s folder), then on PATH. Returns "" if none is found.
std::string find_program(std::string_view name);

/// Starts `argv` detached from this process: a new session (POSIX_SPAWN_SETSID),
/// stdin from /dev/null, stdout and stderr appended to `log_path`.
/// Returns the child's pid, or an internal error naming the program.
bus::result<int> spawn_detached(const std::vector<std::string>& argv, const std::string& log_path);

/// Runs `argv` to completion with stdout captured (at most 64 KiB kept) and
/// stderr appended to `log_path`. Fails if it cannot start, exits non-zero, or
/// runs longer than `timeout_ms` (then it is killed).
bus::result<std::string> run_capture(const std::vector<std::string>& argv,
                                     const std::string& log_path, std::int64_t timeout_ms);

/// True if process `pid` exists and is not a zombie. Reaps it first if it is
/// an exited child of this process.
bool pid_alive(int pid);

/// True if process `pid` is alive and runs `program` (the base name of its
/// argv[0], read from /proc where there is one; without /proc, aliveness alone
/// decides). Guards pid files against a pid reused by another program.
bool runs_program(int pid, std::string_view program);

/// Sends SIGTERM to `pid`; false if that fails (no such process, no permission).
bool terminate(int pid);

/// Writes `content` to `file` with exactly `mode`, replacing it (through a
/// temporary file and rename, so a reader never sees half of it). With
/// `exclusive`, an existing file is an error instead.
bus::result<bool> write_file(const std::filesystem::path& file, std::string_view content,
                             mode_t mode, bool exclusive = false);

/// A fresh random UUID (version 4), from the OS's random source.
std::string random_uuid();

} // namespace cq::cli::sys
