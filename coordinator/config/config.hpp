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
// Every value is a positive duration string (cq's units: 500ms, 90s, 10m,
// 1h30m, 1d), except lost_after, which may also be "never". Unknown tables and
// keys are refused, naming them.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cq::coord {

struct coordinator_settings {
  std::int64_t lease_ms = 30 * 60 * 1000;
  std::int64_t yield_grace_ms = 5 * 60 * 1000;
  std::int64_t node_timeout_ms = 30 * 1000;
  std::int64_t lost_after_ms = 5 * 60 * 1000; ///< 0 = never
  std::int64_t blocked_after_yield_ms = 15 * 60 * 1000;
  std::int64_t blocked_after_other_ms = 30 * 60 * 1000;
  std::int64_t operation_window_ms = 24 * 3600 * 1000;      ///< [retention] operations
  std::int64_t history_window_ms = 30ll * 24 * 3600 * 1000; ///< [retention] history; 0 = never
};

/// Reads `text` (the file `source`, for messages) over `into`. Returns the
/// error (naming the file, the line and the field) or nullopt.
std::optional<std::string> parse_settings(std::string_view text, const std::string& source,
                                          coordinator_settings& into);

} // namespace cq::coord
