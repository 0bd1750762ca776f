// The store's recent environments (internal to store.cpp; ADR 0066). A job's
// environment is kept once per distinct content, in `envs`, keyed by the
// BLAKE2b digest of its encoding. Most submits carry an environment equal to
// a recent one (a person's shell submitting again and again), so the last
// few are kept here with their digests: an equal one reuses the digest
// without encoding and hashing it again, and needs no insert, since its row
// was written by this store in the open transaction or a committed one.
// Whatever could remove such a row empties the cache: a transaction that
// failed (its rollback takes the rows it wrote) and the history expiry
// (which deletes environments no job names).
#pragma once

#include "cq/bus/schema.hpp"

#include <array>
#include <cstddef>
#include <memory>
#include <string>

namespace cq::coord {

class env_digests {
public:
  /// The digest of an environment equal to `env` (the same object, or equal
  /// content) whose row is written, or nullptr.
  const std::string* find(const bus::env_map& env) const {
    for (auto& e : recent_)
      if (e.env && (e.env.get() == &env || *e.env == env))
        return &e.digest;
    return nullptr;
  }
  /// `env`, whose row with `digest` was just written, replacing the oldest.
  void add(std::shared_ptr<const bus::env_map> env, std::string digest) {
    recent_[next_] = {std::move(env), std::move(digest)};
    next_ = (next_ + 1) % recent_.size();
  }
  /// Rows may have been removed: nothing is known written any more.
  void forget() {
    recent_ = {};
    next_ = 0;
  }

private:
  struct entry {
    std::shared_ptr<const bus::env_map> env;
    std::string digest;
  };
  std::array<entry, 4> recent_{};
  std::size_t next_ = 0;
};

} // namespace cq::coord
