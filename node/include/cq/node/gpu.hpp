#pragma once
// GPUs on a node (SPEC section 5): lane detection and per-process VRAM from
// `nvidia-smi`, the GPU lock paths (gpu_lock.hpp) and the kernel fault latch
// (fault_latch.hpp), brought together for the daemon by gpu_supervisor.
//
// Configuration: an optional `[gpu]` table in `<state>/node.toml`:
//
//   [gpu]
//   nvidia_smi = "/usr/bin/nvidia-smi"   # default "nvidia-smi", looked up in PATH
//   lock_paths = ["/tmp/cq-gpu.lock", "/var/lock/legacy-gpu.lock"]  # default none
//   kernel_log = "/dev/kmsg"             # default; "" turns the fault latch's
//                                        # log watch off (the latch file still counts)
//   telemetry = true                     # default; false: nvidia-smi is never run
//                                        # (registered lanes without NVIDIA tools)
//
//   [[gpu.lanes]]                        # optional, repeated: a registered lane
//   name = "gpu0"                        # [A-Za-z0-9._-]{1,64}, unique
//   index = 0                            # optional CUDA device index (>= 0, unique)
//   uuid = "GPU-..."                     # optional (unique); matches nvidia-smi telemetry
//   vram_bytes = 25769803776             # required: the lane's total VRAM
//
// Detection (without registered lanes) runs `nvidia-smi --query-gpu=index,uuid,
// name,memory.total,memory.used --format=csv,noheader,nounits` (no shell, with
// a timeout). Each device line becomes lane gpu<index>. MIG devices never
// appear in that output; lines that do not parse (an `nvidia-smi -L` listing,
// MIG lines, warnings, blank lines) are ignored. A failing binary (not found,
// non-zero exit, timeout) or an empty answer gives no lanes for now: the reason
// is logged once per distinct reason and detection is retried at most every
// 60 s. Lanes, once detected, do not change while the daemon runs (a lane in
// use never changes under a job). On macOS there is one unindexed lane gpu0.
//
// Registered lanes REPLACE detection, on Linux and macOS alike: when
// `[[gpu.lanes]]` is present, nvidia-smi is never asked which devices exist and
// the node has exactly the registered lanes, in file order (a non-NVIDIA
// device, a Linux box without nvidia-smi, a chosen subset of the GPUs). A lane
// without an index runs its jobs without CUDA_VISIBLE_DEVICES (cuda.hpp).
// Telemetry still runs the device query: a registered lane whose uuid appears
// in its answer gets that device's memory.used and its processes; every other
// registered lane (no uuid, no match, nvidia-smi absent or failing) reports 0
// used and 0 outside, so a VRAM cap cannot be enforced on it.
//
// Telemetry, once per sample interval while lanes exist: the same query for
// memory.used per lane, and `nvidia-smi --query-compute-apps=pid,gpu_uuid,
// used_memory --format=csv,noheader,nounits` for per-process VRAM. A process
// belongs to a cq allocation if it or one of its ancestors is in the
// allocation's process group, or if its environment carries
// CQ_ALLOCATION_ID=<id>; every other GPU process is an outside process
// (reported; its memory is the lane's vram_outside_bytes; never signalled).
// An allocation whose processes use more than its start order's vram_bytes on
// one lane is to be stopped with reason "vram_cap".
//
// Cost: two short-lived nvidia-smi processes per sample (a real nvidia-smi
// takes tens to a few hundred ms); they run on the GPU probes' sampler thread
// (node/adapters/gpu.cpp), and the daemon only takes their latest answers.

#include "cq/bus/protocol.hpp"
#include "cq/node/fault_latch.hpp"
#include "cq/node/files.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cq::node {

/// `[gpu]` of node.toml.
struct gpu_config {
  std::string nvidia_smi = "nvidia-smi"; ///< the binary (a bare name is looked up in PATH)
  std::vector<std::string> lock_paths;   ///< first: held by GPU allocations; rest: probes
  std::string kernel_log = "/dev/kmsg";  ///< followed for Xid lines; "" = not followed
  /// false: nvidia-smi is never run, neither for detection (only registered
  /// lanes exist) nor for telemetry (they report 0 VRAM used, and no VRAM cap
  /// can be enforced).
  bool telemetry = true;
  /// `[[gpu.lanes]]`, in file order: name, index, uuid and vram_total_bytes set,
  /// the usage fields 0. Non-empty = these are the lanes (no detection).
  std::vector<bus::lane_info> lanes;
};

/// The same for the text of `node_toml`.
bus::result<gpu_config> parse_gpu_config(std::string_view text,
                                         const std::filesystem::path& node_toml);

/// One device of `--query-gpu=index,uuid,name,memory.total,memory.used`.
struct gpu_device {
  std::int64_t index = 0;
  std::string uuid;
  std::string name;
  std::uint64_t total_bytes = 0; ///< memory.total (MiB in the output)
  std::uint64_t used_bytes = 0;  ///< memory.used (MiB); 0 when "[N/A]"
};

/// Parses the CSV answer of the device query (noheader, nounits). Lines that
/// do not parse are skipped: blank lines, `nvidia-smi -L` lines, MIG lines,
/// warnings. Devices come back ordered by index, without duplicate indexes.
std::vector<gpu_device> parse_gpu_query(std::string_view text);

/// One line of `--query-compute-apps=pid,gpu_uuid,used_memory`.
struct gpu_app {
  pid_t pid = 0;
  std::string uuid;
  std::uint64_t used_bytes = 0; ///< used_memory (MiB); 0 when "[N/A]"
};

/// Parses the CSV answer of the compute-apps query; bad lines are skipped.
std::vector<gpu_app> parse_apps_query(std::string_view text);

/// Lanes for `devices`: gpu<index>, with index, uuid and total memory.
std::vector<bus::lane_info> lanes_from_devices(const std::vector<gpu_device>& devices);

/// Whether `name` is a valid lane name: 1 to 64 of [A-Za-z0-9._-].
bool valid_lane_name(std::string_view name);

/// The process tree facts attribution needs, read from /proc.
struct proc_facts {
  pid_t ppid = 0;
  pid_t pgrp = 0;
};
/// Parses the text of /proc/<pid>/stat for ppid and pgrp; nullopt if malformed.
std::optional<proc_facts> parse_stat_ppid_pgrp(std::string_view text);
/// The value of CQ_ALLOCATION_ID in an environ block ("K=V\0K=V\0..."), if any.
std::optional<std::string> environ_allocation_id(std::string_view environ_block);

/// An allocation as the attribution sees it.
struct gpu_owner {
  std::string allocation;
  pid_t pgid = 0;
};

/// One allocation's VRAM use, per lane, from one sample.
struct vram_use {
  std::map<std::string, std::uint64_t> per_lane; ///< lane -> bytes
  std::uint64_t total() const;
  std::uint64_t max_lane() const;
};

/// The result of attributing one compute-apps answer (pure: `owner` says whose
/// each pid is; nullopt = outside).
struct vram_sample {
  std::map<std::string, vram_use> by_allocation;         ///< allocation -> use
  std::vector<bus::gpu_process> outside;                 ///< not cq's (name left empty)
  std::map<std::string, std::uint64_t> outside_per_lane; ///< lane -> bytes of outside processes
};
template <class OwnerFn>
vram_sample attribute_apps(const std::vector<gpu_app>& apps,
                           const std::vector<bus::lane_info>& lanes, OwnerFn&& owner) {
  vram_sample s;
  for (auto& app : apps) {
    const bus::lane_info* lane = nullptr;
    for (auto& l : lanes)
      if (l.uuid == app.uuid)
        lane = &l;
    if (!lane)
      continue; // a device that is not one of our lanes (a MIG instance, say)
    std::optional<std::string> who = owner(app.pid);
    if (who) {
      s.by_allocation[*who].per_lane[lane->name] += app.used_bytes;
    } else {
      s.outside.push_back(bus::gpu_process{app.pid, lane->name, app.used_bytes, ""});
      s.outside_per_lane[lane->name] += app.used_bytes;
    }
  }
  return s;
}

/// The answers of one telemetry sample: the device query's, then the
/// compute-apps query's (each the command's output, or why it failed).
using smi_answers = std::pair<bus::result<std::string>, bus::result<std::string>>;

class gpu_probes;
class node_disk;

/// An allocation over its VRAM cap on some lane: that lane and its use, or nullopt.
std::optional<std::pair<std::string, std::uint64_t>> over_vram_cap(const vram_use& use,
                                                                   std::uint64_t cap);

/// The GPU side's logic, owned and called by the daemon actor only (so no
/// lock): lanes, VRAM attribution and caps, the fault latch, the GPU lock's
/// references. Its contact with the machine is the GPU probes (seams.hpp),
/// whose nvidia-smi queries (0.1-0.5 s each on real GPUs) run on a thread of
/// their own; tick() only picks up their latest answers, never waiting.
class gpu_supervisor {
public:
  /// Over `probes` (seams.hpp); fault records use set_wall_clock()'s clock.
  gpu_supervisor(gpu_config cfg, std::filesystem::path state_dir,
                 std::unique_ptr<gpu_probes> probes, node_disk& disk);
  /// Over the machine's own GPU probes and wall clock (node/adapters/gpu.cpp).
  gpu_supervisor(gpu_config cfg, std::filesystem::path state_dir);
  ~gpu_supervisor(); ///< stops the probes' sampler thread
  gpu_supervisor(const gpu_supervisor&) = delete;
  gpu_supervisor& operator=(const gpu_supervisor&) = delete;

  /// Loads the fault latch, opens the kernel log and detects lanes. Problems are logged.
  void start(std::int64_t now_ms);
  /// The wall clock of fault records (default: the system's). The daemon
  /// sets its actor clock's, so that a simulated node is deterministic.
  void set_wall_clock(std::function<std::int64_t()> wall) { wall_ = std::move(wall); }

  /// Work due at `now_ms` (monotonic): new kernel log lines, detection retry,
  /// telemetry sample every `sample_every_ms`. Returns allocations to stop now,
  /// each with its reason ("fault" or "vram_cap"); each is returned once.
  struct stop_request {
    std::string allocation;
    std::string reason;
    std::string detail; ///< for the log
  };
  std::vector<stop_request> tick(std::int64_t now_ms, std::int64_t sample_every_ms);

  /// Earliest time tick() has timed work to do (INT64_MAX when none).
  std::int64_t next_deadline() const;

  /// Before launching a GPU allocation: refuses while a fault is latched or a
  /// probe is busy, takes the node's hold on the first lock path (waiting up to
  /// `lock_wait`) and registers the allocation. The error says why in one line.
  status before_launch(const std::string& allocation, const bus::string_list& lanes,
                       std::optional<std::uint64_t> vram_cap, std::chrono::milliseconds lock_wait);
  /// The launch of a registered allocation succeeded: its process group.
  void launched(const std::string& allocation, pid_t pgid);
  /// A GPU allocation found running after a restart: registers it and takes a
  /// lock reference (without waiting; a failure is logged).
  void adopt(const std::string& allocation, pid_t pgid, const bus::string_list& lanes,
             std::optional<std::uint64_t> vram_cap);

  /// Forgets a GPU allocation (its launch failed, or it was reaped and cleaned
  /// up) and gives back its lock reference. Returns its peak VRAM on one lane
  /// (largest per-lane sample) and the reason this supervisor stopped it ("" if
  /// it did not); nullopt for an allocation that is not a GPU allocation.
  struct finished_info {
    std::optional<std::uint64_t> peak_vram_bytes;
    std::string stop_reason;
  };
  std::optional<finished_info> finish(const std::string& allocation);

  /// The reason this supervisor stopped `allocation` ("fault", "vram_cap"), or
  /// "" (not stopped by it, stopped for another reason first, or unknown).
  std::string stop_reason(const std::string& allocation) const;

  /// The daemon stopped `allocation` for another reason first (stop order,
  /// timeout): a later fault or VRAM stop does not replace that reason.
  void stopped_elsewhere(const std::string& allocation);

  /// Adds lanes, fault, outside processes, busy probes and per-allocation VRAM
  /// (merged into existing usage entries) to a heartbeat.
  void fill_heartbeat(bus::heartbeat_req& hb) const;

  /// clear_fault order: archives the latch. not_found when nothing is latched.
  bus::result<std::filesystem::path> clear_fault(const std::string& reason, const std::string& by,
                                                 std::int64_t wall_now_ms);

  bool fault_latched() const { return latch_.latched(); }
  const std::vector<bus::lane_info>& lanes() const { return lanes_; }
  bool is_gpu_allocation(const std::string& allocation) const {
    return allocs_.count(allocation) != 0;
  }

private:
  struct gpu_alloc {
    pid_t pgid = 0; ///< 0 until launched
    bus::string_list lanes;
    std::optional<std::uint64_t> vram_cap;
    std::uint64_t vram_now = 0;  ///< total over lanes, last sample
    std::uint64_t peak_lane = 0; ///< largest per-lane use seen
    std::string stop_reason;     ///< set once this supervisor asked to stop it
    bool stopped_elsewhere = false;
  };

  void detect(std::int64_t now_ms);
  void follow_kernel_log(std::int64_t now_ms, std::vector<stop_request>& stops);
  void sample(std::vector<stop_request>& stops, std::int64_t sample_every_ms);
  void log_once(std::string& last, const std::string& message);

  gpu_config cfg_;
  std::filesystem::path state_dir_;
  std::unique_ptr<gpu_probes> probes_;
  fault_latch latch_;
  bool klog_open_ = false;             ///< the kernel log is followed
  std::int64_t next_klog_open_ms_ = 0; ///< retry of a kernel log that could not be opened
  std::vector<bus::lane_info> lanes_;
  bool lanes_detected_ = false;
  std::int64_t next_detect_ms_ = 0;
  std::int64_t next_sample_ms_ = 0;
  std::map<std::string, gpu_alloc> allocs_;
  std::vector<bus::gpu_process> outside_;
  bus::string_list busy_probes_;
  std::string last_detect_error_, last_sample_error_, last_klog_error_;
  std::function<std::int64_t()> wall_; ///< wall-clock ms for fault records
};

} // namespace cq::node
