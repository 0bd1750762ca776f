#pragma once
// The node's configuration file, `<state>/node.toml`: where the coordinator is,
// the node's name and its secret token (hence mode 0600), written once by
// `cq-node --join` and read at every start. The operator may append two
// optional tables to it (all values are integers; sizes are bytes):
//
//   [capacity]                    # replaces what the machine says, in heartbeats
//   mem_total_bytes = 17179869184 #   and in pre-launch RAM admission
//   mem_available_bytes = 8589934592
//   cpus = 4
//
//   [policy]                      # sent in every heartbeat; the coordinator
//   ram_reserve_bytes = 2147483648  # places jobs with them
//   ram_floor_bytes = 1073741824
//   vram_cap_bytes = 8589934592
//
//   [memory]                      # memory caps (see memcap.hpp)
//   mode = "auto"                 #   auto|cgroup_v2|cgroup_v1|watchdog
//   cgroup_parent = "/sys/fs/cgroup/memory/some/group"  # default: the node's own group
//   cgroup_root = "/sys/fs/cgroup"  # where the hierarchies are mounted
//   sample_ms = 150               #   watchdog / OOM-counter sampling period
//
//   [cleanup]                     # after every allocation (daemon.hpp)
//   max_wait_ms = 10000           #   longest wait for its processes to be gone
//   poll_ms = 100                 #   interval between scans while processes remain
//
//   [retention]                   # finished allocations' directories (output,
//   allocations = "30d"           #   records) and idle jobs' state dirs; "never"
//
// [capacity] exists so that tests can run several fake nodes with chosen
// capacities on one machine; a real node leaves it out. An overridden
// mem_available_bytes is reported as that constant (not as the override minus
// what runs); with only mem_total_bytes overridden, MemAvailable is the
// measured one clamped to that total.

#include "cq/bus/protocol.hpp"
#include "cq/node/files.hpp"
#include "cq/node/memcap.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace cq::node {

/// `[capacity]`: overrides of the measured machine (absent = measured).
struct capacity_config {
  std::optional<std::uint64_t> mem_total_bytes;     ///< replaces MemTotal (> 0)
  std::optional<std::uint64_t> mem_available_bytes; ///< replaces MemAvailable (<= the total)
  std::optional<std::uint64_t> cpus;                ///< replaces the CPU count (> 0)
};

/// `[policy]`: node settings the coordinator places with (absent = its defaults).
struct policy_config {
  std::optional<std::uint64_t> ram_reserve_bytes; ///< RAM kept back from jobs
  std::optional<std::uint64_t> ram_floor_bytes;   ///< MemAvailable floor of this node
  std::optional<std::uint64_t> vram_cap_bytes;    ///< largest VRAM a job may use here
};

/// `[cleanup]`: bounds of the cleanup after every allocation.
struct cleanup_config {
  std::uint64_t max_wait_ms = 10'000; ///< then unconfirmed processes make a hold
  std::uint64_t poll_ms = 100;        ///< between scans while processes remain
};

/// `[retention]`: how long a finished allocation's directory is kept.
struct retention_config {
  /// Older ones (by their exit record) are removed; nullopt = never.
  std::optional<std::int64_t> allocations_ms = std::int64_t{30} * 24 * 3600 * 1000;
};

struct node_config {
  std::string endpoint;       ///< coordinator endpoint, e.g. "tcp://127.0.0.1:7800"
  std::string name;           ///< this node's name, as invited
  std::string token;          ///< the node token returned by node_join
  std::string server_key;     ///< the coordinator's CURVE public key (Z85); "" = plain (loopback)
  capacity_config capacity;   ///< [capacity], possibly overridden on the command line
  policy_config policy;       ///< [policy]
  memory_config memory;       ///< [memory]
  cleanup_config cleanup;     ///< [cleanup]
  retention_config retention; ///< [retention]
  /// [run_as]: identity = "unix user". When set, a root daemon runs each job
  /// as its identity's user, and runs no job of an identity not listed.
  std::map<std::string, std::string> run_as;
};

/// Reads and validates `file`. On failure the message names the file and the
/// problem (missing, unreadable, not TOML, a key missing or empty, a value of
/// [capacity] or [policy] that is not a valid integer, an unknown key in those
/// tables); a missing file is errc::not_found, everything else
/// errc::invalid_argument.
bus::result<node_config> load_node_config(const std::filesystem::path& file);

/// Checks what holds across keys (mem_available_bytes <= mem_total_bytes);
/// the message names the keys. For a config merged from file and command line.
status validate_capacity(const capacity_config& cap);

/// Writes the identity of `cfg` (endpoint, name, token; not the optional
/// tables) to `file` atomically with mode 0600 (see write_file_atomic).
status save_node_config(const std::filesystem::path& file, const node_config& cfg);

} // namespace cq::node
