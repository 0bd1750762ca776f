#pragma once
// The node's outbox: reports (started, exited) that the coordinator has not
// acknowledged yet, re-sent until a reply for each arrives. A report without
// a durable record of its own is persisted as `<dir>/<seq>.json` before it is
// first sent and deleted when its reply arrives, so a coordinator restart, a
// dropped connection or a node daemon restart loses none of them. The daemon
// persists none on a job's path: a start's record is alloc.json and an
// exit's exit.json, and a restarted daemon queues their reports again.
//
// Invariants:
//  1. Sequence numbers are never reused on this node, across restarts: the
//     next one is max(`<dir>/next_seq`, largest pending seq + 1).
//  2. A report is on disk (when the disk works) before add() returns, unless
//     the caller has a durable record of its own to queue it from again after
//     a restart and says so (an exit: exit.json, node/actors/daemon.cpp).
//  3. Memory and per-call work are bounded by the number of pending reports
//     (at most two per allocation) and by `max` in due().
// Used only by the node daemon's loop thread.

#include "cq/bus/protocol.hpp"
#include "cq/node/files.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <vector>

namespace cq::node {

class node_disk;

class outbox {
public:
  /// Opens `dir` (created if missing), loads every pending report (all due at
  /// once), deletes leftover temporaries and moves unreadable reports aside as
  /// `<name>.corrupt` (logged). Fails only if the directory cannot be created
  /// or listed.
  static bus::result<outbox> open(node_disk& disk, const std::filesystem::path& dir);
  /// The same on the machine's own disk (node/adapters/disk.cpp).
  static bus::result<outbox> open(const std::filesystem::path& dir);

  /// Assigns `r.seq`, persists the report and makes it due now. If the disk
  /// write fails the report is still kept in memory (and sent) and the error
  /// is returned for logging: a full disk must not stop an exit from being
  /// reported while this process lives.
  /// With `persist` false the report is kept in memory only (its seq is
  /// still reserved on disk, invariant 1).
  status add(bus::report_req& r, std::int64_t now_ms, bool persist = true);

  /// Up to `max` pending reports whose next send time is <= now_ms, oldest
  /// first. The pointers stay valid until the next add() or remove().
  std::vector<const bus::report_req*> due(std::int64_t now_ms, std::size_t max) const;

  /// Schedules the next send of report `seq` at `at_ms` (no-op if unknown).
  void schedule(std::uint64_t seq, std::int64_t at_ms);

  /// Forgets report `seq` and deletes its file (no-op if unknown). Returns true
  /// if it was pending.
  bool remove(std::uint64_t seq);

  /// Earliest next send time, or INT64_MAX when nothing is pending.
  std::int64_t next_due_ms() const;

  /// The pending report of `kind` for `allocation`, if any (the pointer stays
  /// valid until the next add() or remove()).
  const bus::report_req* find(std::string_view allocation, std::string_view kind) const;

  /// The pending report `seq`, or nullptr.
  const bus::report_req* get(std::uint64_t seq) const;

  /// Allocations with a pending report (the node still holds them: they are
  /// listed in heartbeats until the coordinator acknowledged their exit).
  std::vector<std::string> allocations() const;

  std::size_t size() const { return pending_.size(); }
  std::uint64_t next_seq() const { return next_seq_; }

private:
  struct entry {
    bus::report_req report;    ///< the report as sent
    std::int64_t next_send_ms; ///< monotonic time of its next (re)send
    bool persisted = true;     ///< it has a file in the outbox
  };
  outbox(node_disk& disk, std::filesystem::path dir) : disk_(&disk), dir_(std::move(dir)) {}

  node_disk* disk_;                        ///< where the reports are
  std::filesystem::path dir_;              ///< the outbox directory
  std::map<std::uint64_t, entry> pending_; ///< by seq; oldest first
  std::uint64_t next_seq_ = 1;             ///< seq of the next add()
  /// What the next_seq file says: seqs below it may have been handed out.
  /// add() rewrites it only when next_seq_ reaches it, a block at a time.
  std::uint64_t reserved_until_ = 1;
};

/// How many seqs one write of the next_seq file reserves: a restart skips at
/// most this many, and the file is written once per this many reports
/// instead of once per report (two fsyncs each).
inline constexpr std::uint64_t outbox_seq_block = 1024;

/// The JSON form of a report (fields of report_req; absent optionals are null).
std::string report_to_json(const bus::report_req& r);
/// Parses report_to_json()'s output; an error names the bad field. A missing
/// optional field reads as absent (reports persisted before it was added).
bus::result<bus::report_req> report_from_json(std::string_view text);

} // namespace cq::node
