#pragma once
// The coordinator's TOML configuration (cq-coordinator --config FILE):
// leases, node loss and blocked notices. A pure function from the file's text
// to the figures; no CAF, no I/O (unit-tested).
//
//   [scheduler]
//   lease = "30m"          # default lease of a job (--lease overrides per job)
//   yield_grace = "5m"     # a job asked to yield is stopped after this
//   [nodes]
//   timeout = "30s"        # no heartbeat for this long: the node is down
//   lost_after = "5m"      # an unknown allocation is lost after this ("never": wait)
//   [notify_blocked_after]
//   yield = "15m"          # the head of the queue behind a requested yield
//   other = "30m"          # behind anything else (holds included)
//
//   [http]
//   listen = "127.0.0.1:7880"  # the status page and /metrics (--http overrides)
//   chart_interval = "10s"     # one chart point per interval (3 hours kept at 10s)
//   [[notify]]                 # one table per rule (docs/operations.md)
//   name = "done"              # the rule's name: its cursor and its counters
//   on = ["succeeded", "failed"]
//   owners = ["ada"]           # optional filters: owners, names (globs), priorities
//   per_job = true             # only jobs submitted with `cq submit --notify`
//   webhook = "https://..."    # a JSON POST (format = "json" | "slack" | "ntfy"),
//   command = ["/usr/local/bin/tell", "{kind}", "{job}"]  # or a command
//
// Every other value is a positive duration string (cq's units: 500ms, 90s,
// 10m, 1h30m, 1d), except lost_after, which may also be "never". Unknown
// tables and keys are refused, naming them.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cq::coord {

/// One [[notify]] rule: which committed events it matches and where they go.
struct notify_rule {
  std::string name;
  std::vector<std::string> on;                        ///< event kinds (notify_kinds)
  std::vector<std::string> owners, names, priorities; ///< empty: any; names are globs
  bool per_job = false;                               ///< only jobs submitted with --notify
  std::vector<std::string> command; ///< argv; {kind} {job} {name} {owner} {state} {seq} expand
  std::string webhook;              ///< http(s) URL of a JSON POST
  std::string format = "json";      ///< the webhook's body: json, slack or ntfy
};

/// The event kinds a rule may name: the job event stream's (docs/protocol.md)
/// and the node's (node_down, fault).
extern const std::vector<std::string> notify_kinds;

struct coordinator_settings {
  std::int64_t lease_ms = 30 * 60 * 1000;
  std::int64_t yield_grace_ms = 5 * 60 * 1000;
  std::int64_t node_timeout_ms = 30 * 1000;
  std::int64_t lost_after_ms = 5 * 60 * 1000; ///< 0 = never
  std::int64_t blocked_after_yield_ms = 15 * 60 * 1000;
  std::int64_t blocked_after_other_ms = 30 * 60 * 1000;
  std::int64_t operation_window_ms = 24 * 3600 * 1000;      ///< [retention] operations
  std::int64_t history_window_ms = 30ll * 24 * 3600 * 1000; ///< [retention] history; 0 = never
  std::uint64_t history_jobs = 100'000;       ///< [retention] history_jobs; 0 = any number
  std::string http_listen;                    ///< [http] listen; "" = off
  std::int64_t chart_interval_ms = 10 * 1000; ///< [http] chart_interval
  std::vector<notify_rule> notify;            ///< [[notify]]
};

/// Reads `text` (the file `source`, for messages) over `into`. Returns the
/// error (naming the file, the line and the field) or nullopt.
std::optional<std::string> parse_settings(std::string_view text, const std::string& source,
                                          coordinator_settings& into);

/// CAF worker threads for a machine with `cores` (0: unknown): the cores
/// left beside the gateway's and the store's threads, at least 1 and at most
/// 4. On 2 cores one worker: a second only wakes to take the first's next
/// message, and that hand-off costs more than the work (docs/adr/0049).
inline std::size_t worker_threads(unsigned cores) {
  return cores <= 3 ? 1 : std::min<std::size_t>(cores - 2, 4);
}

} // namespace cq::coord
