#pragma once
// cq-sim's file system for the coordinator's SQLite store: a SQLite VFS
// ("cq-sim") over the default one that keeps every write since a file's last
// sync apart, so that a simulated power loss can take it back, as a disk's
// volatile cache would (FoundationDB's AsyncFileNonDurable, TigerBeetle's
// testing/storage.zig).
//
// The files live where the world puts them (/dev/shm); this layer only
// remembers, per file, the writes and truncations not yet covered by an
// xSync of that file, with the bytes they replaced.
//
// Invariants:
//  1. After `crash(dir)`, every file handle opened under `dir` before it is
//     dead: its writes, truncations and syncs fail with an I/O error and its
//     locks cannot be raised, so closing the connection neither checkpoints
//     nor deletes the WAL (a dead process does nothing). Handles opened later
//     (the next incarnation) are alive.
//  2. `power_loss(dir, ...)` leaves each file under `dir` as it was at its
//     last sync, plus a random subset of the writes since (each kept with
//     probability `keep`, in their order: a torn write is a subset). Only
//     for files with no handle open.
//  3. A file's creation and deletion are durable at once (SQLite syncs the
//     directory with the WAL's first sync; the simulator does not model a
//     lost directory entry).

#include <cstdint>
#include <random>
#include <string>

namespace cq::sim {

/// Registers the VFS (once) and returns its name for sqlite3_open_v2.
const char* sim_vfs_name();

/// The process that had files open under `dir` dies (invariant 1).
void sim_vfs_crash(const std::string& dir);

struct power_loss_report {
  int files = 0;        ///< files with unsynced changes
  int changes_lost = 0; ///< writes and truncations taken back
  int changes_kept = 0; ///< unsynced, and on the platter anyway
};

/// The machine under `dir` loses power (invariant 2).
power_loss_report sim_vfs_power_loss(const std::string& dir, std::mt19937_64& rng, double keep);

/// Files opened under `dir` from now on keep no record of their unsynced
/// writes (a world without power losses: a study); a power loss must not
/// come. Forgotten with the dir.
void sim_vfs_untracked(const std::string& dir);

/// Forgets every file under `dir` (the world ends).
void sim_vfs_forget(const std::string& dir);

} // namespace cq::sim
