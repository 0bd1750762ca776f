#pragma once
// GPU lock paths (SPEC section 5): node.toml `[gpu] lock_paths = [FIRST, PROBE...]`.
//
// The first path is the lock that GPU users of this machine agree on. cq holds
// an exclusive flock() on it while any of its GPU allocations runs, so that an
// outside (non-cq) program that takes the same lock waits or refuses.
//
// Why one hold for the node, refcounted, and not one flock per allocation:
// flock() locks belong to an open file description, so two LOCK_EX locks taken
// by the same daemon through two open() calls exclude each other; a second GPU
// allocation on another lane could never start while the first one runs. The
// lock is meant to keep outside users out, not to separate cq's own jobs (the
// coordinator already gives each allocation its own lanes), so the daemon
// holds ONE descriptor with LOCK_EX while at least one GPU allocation lives:
// the first acquire() takes it (waiting a short while if an outside process
// holds it), later ones only count, and the last release() unlocks and closes
// it. The descriptor is close-on-exec: workloads never inherit the lock, so a
// job's leftover child cannot keep it after cq released it.
//
// Further paths are probes: another program's lock that cq only looks at.
// busy_probes() tries LOCK_EX|LOCK_NB on each (through a fresh descriptor,
// released at once) and returns those held by someone else; a missing probe
// file counts as free (cq never creates probe files). A busy probe blocks GPU
// launches and is reported in the heartbeat.
//
// Used only by the node daemon's loop thread.

#include "cq/bus/protocol.hpp"
#include "cq/node/files.hpp"

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace cq::node {

class gpu_lock {
public:
  /// `paths`: the configured lock paths (may be empty: then nothing is locked
  /// and there are no probes).
  explicit gpu_lock(std::vector<std::string> paths);
  ~gpu_lock();
  gpu_lock(const gpu_lock&) = delete;
  gpu_lock& operator=(const gpu_lock&) = delete;

  /// Takes one reference on the node's hold of the first path. The first
  /// reference opens the file (created with mode 0666 if missing) and takes
  /// LOCK_EX, retrying for up to `wait`; errc::unavailable if an outside
  /// process still holds it then, errc::internal if the file cannot be opened.
  /// Always succeeds when no path is configured.
  status acquire(std::chrono::milliseconds wait);

  /// Gives back one reference; the last one unlocks and closes the file.
  void release();

  /// Number of references (GPU allocations holding the lock).
  std::size_t holders() const { return holders_; }

  /// True while the node holds the flock on the first path.
  bool held() const { return fd_ >= 0; }

  /// The probe paths (all but the first) that another process holds now.
  bus::string_list busy_probes() const;

  const std::vector<std::string>& paths() const { return paths_; }

private:
  std::vector<std::string> paths_;
  int fd_ = -1;             ///< open on paths_[0] with LOCK_EX while holders_ > 0
  std::size_t holders_ = 0; ///< references taken by acquire()
};

/// Tries LOCK_EX|LOCK_NB on `path` through a fresh descriptor and releases it
/// at once. True if another open file description holds a lock on it; false
/// if it is free or does not exist (or cannot be opened: logged by the caller).
bool probe_is_busy(const std::string& path);

} // namespace cq::node
