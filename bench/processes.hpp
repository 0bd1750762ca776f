#pragma once
// cq-bench's whole processes: timing one, reading a process's RSS, and a
// private `cq up` (a real coordinator and node on this machine).

#include "cq/bus/client.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cq::bench {

/// The `p`th percentile (0-100) of `v` by rank; 0 when it is empty.
double percentile(std::vector<double> v, double p);

/// Daemons cq-bench started (its coordinators, a `cq up`'s coordinator and
/// node) are tracked so that a cq-bench stopped by SIGINT, SIGTERM or SIGHUP
/// (Ctrl-C, `kill`, a closed terminal) ends them too: their destructors do
/// not run then, and a coordinator left behind would load the machine the
/// next measurement runs on. On such a signal a thread of its own sends each
/// daemon SIGTERM, waits up to 5 s for them to end, runs the tracked
/// cleanups (a task-spooler server's end, the state folders' removal), and
/// then takes the signal's default action. A second signal meanwhile takes
/// it at once.
void end_daemons_on_signals();
void track_daemon(pid_t pid);   ///< at most 64 at once; more go untracked
void untrack_daemon(pid_t pid); ///< before ending it the usual way
/// Registers `undo` to run after the daemons ended when a signal stops
/// cq-bench; the returned id drops it (the destructor that does the same).
std::uint64_t on_signal_cleanup(std::function<void()> undo);
void drop_signal_cleanup(std::uint64_t id);
/// on_signal_cleanup of removing folder `dir` and what it holds.
std::uint64_t remove_on_signal(std::filesystem::path dir);

/// VmRSS of `pid` in kB; -1 when it cannot be read.
long rss_kb(pid_t pid);

/// Wall time of one whole process `argv` (output discarded) with exactly
/// the environment `env`, in ms; throws if it does not exit 0.
double time_process(std::vector<std::string> argv, std::vector<std::string> env);

/// The standard output of one whole process `argv` with exactly the
/// environment `env`; throws if it does not exit 0.
std::string output_of(const std::vector<std::string>& argv, const std::vector<std::string>& env);

/// Runs `stop` (a server's own way to end; it is gone or going either way
/// when that fails), then removes `dir`, for a destructor.
void stop_and_remove(std::vector<std::string> stop, const std::vector<std::string>& env,
                     const std::filesystem::path& dir);

/// `cq up` in a private home on a free port: a real coordinator and node on
/// this machine, as a person starts them; `cq down` when it goes.
struct local_up {
  std::filesystem::path home;
  std::vector<std::string> env;
  std::string bin;
  std::unique_ptr<bus::client> poller;
  std::uint64_t cleanup = 0; ///< removes `home` if a signal stops cq-bench

  local_up();
  ~local_up();
  local_up(const local_up&) = delete;
  local_up& operator=(const local_up&) = delete;
  /// How many jobs are not finished yet (one connection for every poll).
  std::uint64_t live_jobs();
  /// Until no job is live, or throws `what` after `limit`. Each poll is a
  /// request the coordinator serves beside the drain it measures, so the
  /// pause after one grows with the jobs still live (2 ms each, at most
  /// 50 ms): a few dozen polls a drain, and the last one within a
  /// job's time of its end.
  void wait_drained(std::chrono::seconds limit, const char* what);
  /// The pid `cq up` recorded for its `daemon` (coordinator or node).
  pid_t pid_of(const std::string& daemon) const;
};

/// task-spooler's binary on PATH ("" if it is not installed).
std::string find_tsp();

/// A private task-spooler server (its socket and files in a fresh folder),
/// killed and removed at the end.
struct tsp_server {
  std::string bin;
  std::filesystem::path dir;
  std::vector<std::string> env;
  std::uint64_t cleanup = 0; ///< ends its server and removes `dir` if a signal stops cq-bench
  tsp_server(std::string tsp, int max_finished);
  tsp_server(const tsp_server&) = delete;
  tsp_server& operator=(const tsp_server&) = delete;
  ~tsp_server();
  /// Its server's RSS in MB (`tsp -l` starts one), found as the `tsp`
  /// process serving this socket: its own environment names it, as each
  /// client's does, and the server is the one that lives on. -1 when none.
  double server_rss_mb() const;
};

} // namespace cq::bench
