#pragma once
// Holds (Attention): lanes, or the whole node (lane ""), whose cleanup could
// not be confirmed. Persisted in <state>/holds.json, reported in every
// heartbeat, removed only by a release order naming the exact id.
//
// Invariants:
//  1. Every hold id is fresh (128 random bits, hex): a stale id never matches
//     a newer hold.
//  2. holds.json is rewritten atomically after every change (files.hpp).

#include "cq/bus/protocol.hpp"
#include "cq/node/files.hpp"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace cq::node {

class node_disk;

/// 32 hex digits from the kernel's random source.
std::string random_hex_id();

class hold_store {
public:
  /// Loads `file` (missing = no holds; unreadable = logged, and kept aside as
  /// holds.json.corrupt so that no hold is silently forgotten).
  /// `new_id` makes hold ids (default: random_hex_id; cq-sim's is seeded).
  hold_store(node_disk& disk, std::filesystem::path file,
             std::function<std::string()> new_id = random_hex_id);
  /// The same on the machine's own disk (node/adapters/disk.cpp).
  explicit hold_store(std::filesystem::path file);

  const std::vector<bus::hold_info>& all() const { return holds_; }
  /// The cgroups the holds keep (same index as all(); "" = none).
  const std::vector<std::string>& cgroups() const { return cgroups_; }

  /// Adds a hold with a fresh id and persists; returns the id. `cgroup`: the
  /// allocation's cgroup that is left behind ("" = none); it belongs to the
  /// hold until the hold is released.
  std::string add(std::string lane, std::string allocation, std::string reason, std::int64_t at_ms,
                  std::string cgroup = {});

  /// Removes the hold `id`; false if there is none. The cgroup it owned (if
  /// no other hold still owns it) is returned in `cgroup`.
  bool release(const std::string& id, std::string* cgroup = nullptr);

  /// cgroups whose removal failed after their hold was released; removal is
  /// retried (the daemon's timers) until it succeeds. Persisted with the holds.
  const std::vector<std::string>& leftover_cgroups() const { return leftovers_; }
  void add_leftover(const std::string& dir);
  void remove_leftover(const std::string& dir);

private:
  void save() const;
  node_disk* disk_;
  std::filesystem::path file_;
  std::function<std::string()> new_id_;
  std::vector<bus::hold_info> holds_;
  std::vector<std::string> cgroups_; ///< per hold (same index): its cgroup, or ""
  std::vector<std::string> leftovers_;
};

} // namespace cq::node
