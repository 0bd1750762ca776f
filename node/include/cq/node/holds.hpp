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
#include <string>
#include <vector>

namespace cq::node {

class hold_store {
public:
  /// Loads `file` (missing = no holds; unreadable = logged, and kept aside as
  /// holds.json.corrupt so that no hold is silently forgotten).
  explicit hold_store(std::filesystem::path file);

  const std::vector<bus::hold_info>& all() const { return holds_; }

  /// Adds a hold with a fresh id and persists; returns the id.
  std::string add(std::string lane, std::string allocation, std::string reason, std::int64_t at_ms);

  /// Removes the hold `id`; false if there is none.
  bool release(const std::string& id);

private:
  void save() const;
  std::filesystem::path file_;
  std::vector<bus::hold_info> holds_;
};

/// 32 hex digits from the kernel's random source.
std::string random_hex_id();

} // namespace cq::node
