#pragma once
// Standby cq-shims (ADR 0048): a few shims started ahead, each already in a
// memory group of its own (cgroup v1), waiting on a socket for a job. A
// start takes one: its group is renamed for the allocation and capped, and
// the standby is handed the exec (launcher.cpp). The start then waits for
// neither a process start nor a cgroup migration, whose RCU grace period
// costs 15-20 ms after a quiet spell. Used by the `linux` process host.
//
// Standbys are forked by a zygote, a cq-shim the pool starts once (ADR
// 0060): a fork of a running cq-shim instead of a fork and an exec of a new
// one. Where the zygote cannot serve (it failed three times), each standby is
// spawned as before.
//
// Thread-safe. Standbys are the daemon's children (the zygote forks them
// with CLONE_PARENT); whatever is left of the pool when it closes is killed,
// reaped and its groups removed, and the zygote with them. A daemon that
// dies leaves them and the zygote to exit on their sockets' end, and the
// groups (named cq-OWNER-standby-N) to the next start's stale-group removal.

#include "cq/node/memcap.hpp"

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>

namespace cq::node {

struct standby {
  pid_t pid = -1;
  int pidfd = -1;
  int sock = -1; ///< the daemon's end
  std::filesystem::path dir;
  bool ready = false;          ///< it said "R": it is in its group
  std::int64_t started_ms = 0; ///< steady clock
  /// Its start time (/proc), read once at its spawn: with the pid, the
  /// leader it becomes (ADR 0058).
  std::uint64_t start_ticks = 0;
};

class standby_pool {
public:
  ~standby_pool() { close(); }

  /// A ready standby, its group renamed `group_name(setup, allocation)` and
  /// capped at `cap`; nullopt when none is ready or the rename fails (the
  /// caller starts a shim as before). The first call enables the pool.
  std::optional<standby> claim(const memcap_setup& setup, const std::string& allocation,
                               std::optional<std::uint64_t> cap, const std::string& shim);
  /// Starts standbys until `size` are there (or one fails to start).
  void top_up();
  /// Replaces standbys older than max_age_ms: a leader's start time bounds
  /// cleanup's scan (process_tree.cpp), so a standby should not wait long.
  void refresh();
  bool enabled();
  /// How many standbys wait (ready or not yet).
  std::size_t waiting();
  /// Ends a standby that was claimed but could not be used.
  static void discard(standby& s);
  void close();

  static constexpr std::size_t size = 2;
  static constexpr std::int64_t max_age_ms = 60'000;
  /// While a standby still waits, the pool is topped up only once no start
  /// has asked for one for this long (ADR 0076): a standby's start moves it
  /// into its group, whose grace period holds every cgroup directory
  /// operation on the machine, the removal of a short job's group included.
  /// CQ_STANDBY_QUIET_MS in cq-node's environment sets it, at most
  /// max_age_ms (the tests' way to see the rule at work).
  static std::int64_t quiet_ms();

private:
  std::optional<standby> start_one();
  /// A standby's process through the zygote (started here if it is not
  /// running): its pid, or nullopt where the zygote cannot serve.
  std::optional<pid_t> fork_standby(int procs, int sock);
  void end_zygote();

  std::mutex m_;
  bool enabled_ = false;
  bool closed_ = false;
  memcap_setup setup_;
  std::string shim_;
  std::deque<standby> ready_;
  std::uint64_t next_ = 0;
  std::mutex zygote_m_; ///< guards the zygote's four fields, held over a fork
  pid_t zygote_pid_ = -1;
  int zygote_pidfd_ = -1;
  int zygote_sock_ = -1;
  int zygote_failures_ = 0;
};

} // namespace cq::node
