#pragma once
// The node's seams (ADR 0020): everything the node actors (node/actors/) need
// from the operating system, as interfaces that production implements in
// node/adapters/ and a simulated node implements over a simulated host. No
// CAF here, and no OS header: the actors include this, never the adapters.
//
// Calls that finish at once (a signal, a scan, a cgroup file, a probe) are
// plain calls: the caller is an actor, and a simulated host answers them
// from its own state just as deterministically. What happens on its own (a
// workload ends, a frame arrives, a send finds no connection) comes back
// through the handlers given here; production calls them on an adapter
// thread, and they only hand the event to an actor (anon_send).
//
// Contracts:
//  1. launch() starts nothing that is not supervised: on success the leader
//     is a child of this process, leads its own process group and is not
//     reaped until watch() reported its end; on failure nothing is left
//     running.
//  2. watch()'s handler runs exactly once per watched leader, after the
//     leader's process group got SIGKILL (our child: before it is reaped, so
//     the group id cannot have been reused) and after it was reaped.
//  3. Every signal to a single process goes through a pidfd opened before a
//     start-time check, so a reused pid is never signalled.
//  4. when_gone()'s handler runs at most once, and never before every
//     process it names has ended (a reused pid counts as ended).

#include "cq/bus/protocol.hpp"
#include "cq/node/files.hpp"
#include "cq/node/gpu.hpp"
#include "cq/node/launcher.hpp"
#include "cq/node/memcap.hpp"
#include "cq/node/meminfo.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cq::node {

/// A leader this node supervises: its pid (also its process group id) and
/// its start time (/proc/<pid>/stat field 22), which tell it from a reused pid.
struct leader_id {
  pid_t pid = -1;
  std::uint64_t start_ticks = 0;
};

/// How a watched leader ended.
struct child_exit {
  /// Our child, reaped: `exit_code` / `signal` are its wait status. False for a
  /// re-adopted leader (not our child: only the shim's status file knows).
  bool reaped = false;
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> signal;
  std::uint64_t maxrss_bytes = 0; ///< the leader's own peak RSS (rusage), 0 if unknown
};

/// One cleanup scan of an allocation (daemon.hpp, invariant 3).
struct scan_request {
  std::string allocation; ///< its processes carry CQ_ALLOCATION_ID=<allocation>
  leader_id leader;       ///< processes started before it are not the allocation's
  bool by_group = true;   ///< members of the leader's process group count
  mem_group group;        ///< every process in its cgroup counts
  /// Only the cgroup's members (the confirming scan of an allocation with a
  /// cgroup, supervisor.cpp): the process table is not listed. A host that
  /// cannot read the cgroup scans in full.
  bool members_only = false;
};

/// What a cleanup scan found (and sent SIGKILL to, except suspects).
struct scan_result {
  std::size_t count = 0; ///< targets and suspects found; 0 = an empty scan
  std::string found;     ///< the first 16 of them, for a hold's reason
  /// The processes it sent SIGKILL to (as leader_id: pid and start time), for
  /// process_host::when_gone; empty from a host that does not say.
  std::vector<leader_id> killed;
};

/// Processes, signals and the process table (node/adapters/linux/ and posix/process_host.cpp).
class process_host {
public:
  virtual ~process_host() = default;
  /// Starts `req` (launcher.hpp) in `group` (when it has a directory: the child
  /// joins it between fork and exec). Contract 1. Errors say why in one line.
  virtual bus::result<leader_id> launch(const launch_request& req, const mem_group& group) = 0;
  /// A memory group made ahead with a standby cq-shim `shim` already in it
  /// (ADR 0048), now named for `allocation` and capped at `cap`: launch()
  /// with it hands that standby the exec, so the start waits for neither a
  /// process start nor a cgroup migration. nullopt when none is ready (the
  /// caller makes a group as before).
  virtual std::optional<mem_group> claim_standby(const memcap_setup&, const std::string&,
                                                 std::optional<std::uint64_t>,
                                                 const std::string& /*shim*/) {
    return std::nullopt;
  }
  /// The leader that launch() with claimed group `g` will start: its
  /// standby, whose pid and start time are known before the launch (the
  /// allocation's record carries them, ADR 0058: a standby runs the job
  /// in place, without the marker in its own environment). nullopt for a
  /// group without a standby.
  virtual std::optional<leader_id> standby_leader(const mem_group& /*g*/) { return std::nullopt; }
  /// A claimed group that will not be launched after all: its standby ends.
  virtual void unclaim(const mem_group&) {}
  /// Takes over a leader found after a restart (not our child): true if
  /// `leader` is still that process and it can be watched.
  virtual bool adopt(const leader_id& leader) = 0;
  /// This boot of the machine: another boot has another id. A leader's pid
  /// and start time name a process within one boot only (after a reboot
  /// both count from zero again), so an allocation recorded under another
  /// boot is never re-adopted. "" when the host cannot tell (then records
  /// carry none and no boot is compared).
  virtual std::string boot_id() { return {}; }
  /// The live group leader whose environment carries `marker`
  /// ("CQ_ALLOCATION_ID=<id>"), for a record written before its launch.
  virtual std::optional<leader_id> find_leader(const std::string& marker) = 0;
  /// Reports the end of a launched or adopted leader to `on_exit` (contract 2).
  virtual void watch(pid_t pid, std::function<void(child_exit)> on_exit) = 0;
  /// SIGTERM / SIGKILL to the process group `pgid`.
  virtual void terminate_group(pid_t pgid) = 0;
  virtual void kill_group(pid_t pgid) = 0;
  /// SIGKILL to the group and to every descendant of its members that left it
  /// (the watchdog's kill: setsid does not escape it).
  virtual void kill_tree(pid_t pgid) = 0;
  /// RSS in bytes summed over each process group (one process-table scan).
  virtual std::vector<std::uint64_t> group_rss(const std::vector<pid_t>& pgids) = 0;
  /// RSS in bytes over each group and its members' descendants (one scan).
  virtual std::vector<std::uint64_t> tree_rss(const std::vector<pid_t>& pgids) = 0;
  /// One cleanup scan: SIGKILL to every target (contract 3); suspects (our
  /// user, environment unreadable) are counted, never signalled.
  virtual scan_result cleanup_scan(const scan_request& req) = 0;
  /// Calls `on_gone` (on any thread, once) when every process of `procs` has
  /// ended; at once for one already gone or whose pid now names another
  /// process. False when the host cannot watch them: the caller's timer
  /// serves (the cleanup rescans every [cleanup] poll_ms anyway). Contract 4.
  virtual bool when_gone(const std::vector<leader_id>& /*procs*/,
                         std::function<void()> /*on_gone*/) {
    return false;
  }
  /// cq run --pty: writes `frames` (terminal_frame.hpp, at most
  /// terminal_write_max bytes) into the FIFO cq-shim reads, at once and
  /// whole or not at all; errc::unavailable when no shim has it open (not
  /// yet, or no longer) or it is full.
  virtual status write_terminal(const std::filesystem::path& fifo, std::string_view frames) = 0;
  /// Stops watching everything (the daemon stops; the workloads keep running).
  virtual void close() = 0;
};

/// The node's disk (node/adapters/disk.cpp): the state dir and everything in
/// it. What "durable" means is the contract a simulated disk keeps when its
/// machine loses power: durable writes survive, the others may not.
class node_disk {
public:
  virtual ~node_disk() = default;
  /// Replaces `file` atomically and durably (files.hpp: write_file_atomic).
  virtual status write_atomic(const std::filesystem::path& file, std::string_view data,
                              unsigned mode = 0644) = 0;
  /// write_atomic for each of `writes`, as a group: each result is its
  /// file's, and every file written is durable when it returns. The
  /// machine's disk syncs them together (files.hpp: write_files_atomic), in
  /// about two journal commits for the group; this default writes them one
  /// by one.
  virtual std::vector<status> write_atomic_all(const std::vector<file_write>& writes) {
    std::vector<status> out;
    out.reserve(writes.size());
    for (auto& w : writes)
      out.push_back(write_atomic(w.file, w.data, w.mode));
    return out;
  }
  /// Creates `file`, which must not exist, with `data`, durably (the file
  /// and its directory synced; files.hpp: write_file_once): one journal
  /// commit where write_atomic's rename needs two. A crash before it returns
  /// may leave the file missing, empty or partial: only for a record whose
  /// reader takes an unreadable one for a missing one (alloc.json).
  virtual status write_once(const std::filesystem::path& file, std::string_view data,
                            unsigned mode = 0644) = 0;
  /// Replaces `file`'s content with `data` (made `mode` if missing), with no
  /// sync at all: after a power loss it may be missing, empty, partial or
  /// old. For what matters only while the machine stays up (a leader's pid).
  virtual status write_volatile(const std::filesystem::path& file, std::string_view data,
                                unsigned mode = 0644) = 0;
  /// Appends `text` (created 0640 if missing). Not durable.
  virtual status append(const std::filesystem::path& file, std::string_view text) = 0;
  /// Creates `dir` and its missing parents, durably (each new entry synced).
  virtual status make_dirs(const std::filesystem::path& dir) = 0;
  /// Directories whose entries a caller syncs later, together (sync_dirs).
  using pending_syncs = std::vector<std::filesystem::path>;
  /// make_dirs, with the directories it would sync added to `later` instead:
  /// the new entries are durable only once sync_dirs(later) returns. A
  /// caller that makes all of a record's directories first and syncs them
  /// after the record lets a journaling file system commit them in one
  /// transaction with it, rather than one commit per directory (ADR 0045).
  virtual status make_dirs_later(const std::filesystem::path& dir, pending_syncs& later) = 0;
  /// Syncs each directory in `dirs` once, in order, and clears it, failed or
  /// not (a sync that failed is not tried again: it may then report success
  /// for data it lost).
  virtual status sync_dirs(pending_syncs& dirs) = 0;
  /// write_once without its syncs, for a group of records (the starts of
  /// one burst): `file` goes into `files` and its directory into `dirs`, and
  /// it is durable once sync_files(files) and then sync_dirs(dirs) returned.
  /// A group so pays one sync per file and one per directory, shared
  /// directories once; on a journaling file system the first sync commits
  /// them all (ADR 0068). What a crash before the syncs leaves is write_once's.
  virtual status write_once_later(const std::filesystem::path& file, std::string_view data,
                                  pending_syncs& files, pending_syncs& dirs,
                                  unsigned mode = 0644) = 0;
  /// Syncs the content of each file in `files`, in order, and clears it,
  /// failed or not (as sync_dirs).
  virtual status sync_files(pending_syncs& files) = 0;
  /// sync_files(files) and sync_dirs(dirs) as one: every item is synced (a
  /// directory once) and both are cleared, failed or not, and the first
  /// failure is returned (a file's before a directory's). All are durable
  /// once it returns done. The machine's disk issues the fsyncs side by side
  /// (ADR 0077), so a crash before it returns may leave any of them synced
  /// and not the others: only for records written by write_once_later,
  /// whose reader takes one missing, empty or partial for a start cut short
  /// (ADR 0045).
  virtual status sync_together(pending_syncs& files, pending_syncs& dirs) {
    auto f = sync_files(files);
    auto d = sync_dirs(dirs);
    return f ? d : f;
  }
  /// Creates `dir`, whose parent exists, without a sync: its entry is durable
  /// once the parent is synced (a write_atomic or write_once into the parent
  /// syncs it), so a caller that writes a record there next pays one fsync,
  /// not two. Done when it is there already.
  virtual status make_dir_unsynced(const std::filesystem::path& dir) = 0;
  /// At most about `max` bytes of `file`; nullopt when it cannot be read.
  virtual std::optional<std::string> read(const std::filesystem::path& file,
                                          std::size_t max = 1 << 20) = 0;
  virtual bool exists(const std::filesystem::path& p) = 0;
  virtual bool is_directory(const std::filesystem::path& p) = 0;
  /// The names in `dir`, sorted (empty when it cannot be listed).
  virtual std::vector<std::string> list(const std::filesystem::path& dir) = 0;
  /// Durable rename and remove.
  virtual status rename(const std::filesystem::path& from, const std::filesystem::path& to) = 0;
  virtual status remove(const std::filesystem::path& p) = 0;
  /// Asks the file system to place each directory made in `dir` from now on
  /// in a part of the disk of its own choosing, with free inodes, rather
  /// than beside `dir` (ext4's flag for the top of a directory hierarchy,
  /// as for home directories; ADR 0061). Best effort, and nothing else
  /// changes: false where the file system has no such flag.
  virtual bool spread_subdirs(const std::filesystem::path& dir) {
    (void)dir;
    return false;
  }
  /// Removes `p` and everything under it. Not durable: after a power loss
  /// some of it may be back (whoever removed it removes it again).
  virtual status remove_tree(const std::filesystem::path& p) = 0;
  /// Moves the tree at `from` to `to` (a name on the same file system that
  /// does not exist yet) at once, so that a crash sees it whole at one name
  /// or the other, never half removed where it was. Not durable, as
  /// remove_tree: it is the first step of a removal.
  virtual status move_aside(const std::filesystem::path& from, const std::filesystem::path& to) = 0;
  /// Up to `max` bytes of `file` from `offset`, and the file's size;
  /// errc::not_found when it does not exist.
  struct chunk {
    std::string data;
    std::uint64_t size = 0;
  };
  virtual bus::result<chunk> read_at(const std::filesystem::path& file, std::uint64_t offset,
                                     std::size_t max) = 0;
};

/// The GPU side's contact with the machine (node/adapters/gpu.cpp): nvidia-smi
/// on a thread of its own, the process table for attribution, the kernel log,
/// the GPU lock paths. gpu_supervisor (gpu.hpp) is the logic over it.
class gpu_probes {
public:
  virtual ~gpu_probes() = default;
  /// The lanes the device query gives now, or why there are none.
  virtual bus::result<std::vector<bus::lane_info>> detect_lanes() = 0;
  /// The device query's and the compute-apps query's latest answers since
  /// the last call, or nullopt. Never waits; `every_ms` sets the pace.
  virtual std::optional<smi_answers> telemetry(std::int64_t every_ms) = 0;
  /// Which allocation the GPU process `pid` belongs to (gpu.hpp: owner_of).
  virtual std::optional<std::string> owner_of(pid_t pid, const std::vector<gpu_owner>& owners) = 0;
  /// The name of process `pid` (comm), for an outside GPU process.
  virtual std::optional<std::string> process_name(pid_t pid) = 0;
  /// Opens the kernel log at its end; errors name it.
  virtual status open_kernel_log() = 0;
  /// Complete lines appended to the kernel log since the last call.
  virtual std::vector<std::string> kernel_log_lines() = 0;
  /// The node's hold on the first lock path (gpu_lock.hpp): the first
  /// reference takes it (waiting up to `wait`), the last release drops it.
  virtual status lock_acquire(std::chrono::milliseconds wait) = 0;
  virtual void lock_release() = 0;
  /// The probe paths (lock paths after the first) held by someone else now.
  virtual bus::string_list busy_probes() = 0;
  /// Whether any probe path is configured (busy probes are then reported).
  virtual bool has_probes() const = 0;
};

/// Host probes: memory, CPUs, memory cgroups, the state dir's lock
/// (node/adapters/linux/ and posix/host_probes.cpp).
class host_probes {
public:
  virtual ~host_probes() = default;
  /// MemTotal and MemAvailable as measured (nullopt when unreadable).
  virtual std::optional<mem_info> memory() = 0;
  virtual std::uint64_t cpus() = 0;
  /// Detects the memory-cap mode for `cfg` (memcap.hpp).
  virtual bus::result<memcap_setup> detect_memcap(const memory_config& cfg) = 0;
  virtual bus::result<mem_group> create_group(const memcap_setup& setup,
                                              const std::string& allocation,
                                              std::optional<std::uint64_t> cap_bytes) = 0;
  virtual std::optional<std::uint64_t> oom_kills(const mem_group& g) = 0;
  virtual std::optional<std::uint64_t> peak_usage(const mem_group& g) = 0;
  virtual std::optional<std::uint64_t> current_usage(const mem_group& g) = 0;
  virtual status remove_group(const mem_group& g) = 0;
  /// Kills what is left in a group of ours and removes it; true once it is gone.
  virtual bool remove_leftover_group(const mem_group& g) = 0;
  /// The groups of `setup`'s owner that exist under its parent (names as
  /// group_name makes them), for the removal of stale ones at start.
  virtual std::vector<std::string> own_groups(const memcap_setup&) { return {}; }
  /// Holds `file` locked (flock) for the life of the process, with our pid in
  /// it. errc::already_exists (naming the holder's pid) when another holds it.
  virtual status lock_for_life(const std::filesystem::path& file) = 0;
  /// cq-shim beside this executable ("" if there is none).
  virtual std::string find_shim() = 0;
  /// A fresh id of 32 hex digits (daemon.id, holds).
  virtual std::string random_id() = 0;
  /// What the platform knows of its GPUs that node.toml's [gpu] does not say
  /// (a Mac: one lane gpu0 without an index, no nvidia-smi, no kernel log).
  virtual void platform_gpu_defaults(gpu_config&) {}
  /// The GPU probes for `cfg` (one per daemon, owned by its gpu_supervisor).
  virtual std::unique_ptr<gpu_probes> gpu(const gpu_config& cfg) = 0;
};

/// The connection to the coordinator (node/adapters/link.cpp): one DEALER
/// socket on a thread of its own.
class coordinator_link {
public:
  virtual ~coordinator_link() = default;
  struct handlers {
    /// The frames from the coordinator that one wake-up found waiting, in
    /// order (one frame per message; others are dropped). The daemon reads
    /// them all before it acts on any (a stop behind a start wins).
    std::function<void(std::vector<std::string> frames)> on_frames;
    /// The frame sent with `tag` found no connection and was dropped.
    std::function<void(std::uint64_t tag)> on_unsent;
  };
  /// Connects and starts delivering. Errors name the endpoint.
  virtual status start(handlers h) = 0;
  /// Queues `bytes`; safe from any thread. Never blocks.
  virtual void send(std::string bytes, std::uint64_t tag) = 0;
  /// Stops the thread; nothing is delivered afterwards.
  virtual void stop() = 0;
};

} // namespace cq::node
