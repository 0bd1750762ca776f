#pragma once
// One simulated machine running the real node daemon: the node's actors
// (node/actors/) on the world's deterministic scheduler, over this host's
// implementation of the node's seams (node/include/cq/node/seams.hpp):
//  - processes: each workload is a plan read from its argv (run time, exit
//    code, RSS, TERM ignored, checkpoints, crash signal); it ends at a
//    virtual time, writes cq-shim's status file like the real shim, and keeps
//    running when the daemon crashes (so recovery re-adopts it or finishes
//    it from the status file);
//  - host probes: MemTotal and MemAvailable from the node's spec and the RSS
//    of what runs, watchdog memory mode, seeded ids;
//  - the link: frames through the world's network; a send without a
//    connection (partition, coordinator down) comes back as unsent.
//  - the disk: the state dir on a simulated disk (disk.hpp) that a daemon
//    crash leaves alone and a power loss takes back to what was durable.
// GPU lanes are registered in node.toml without telemetry; a GPU fault is an
// Xid line appended to the kernel log the daemon follows.

#include "disk.hpp"
#include "node_model.hpp"

#include "cq/node/seams.hpp"

#include <caf/fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

namespace cq::sim {

class node_host final : public node::process_host,
                        public node::host_probes,
                        public node::coordinator_link {
public:
  /// `link_up` says whether a frame sent now finds a connection.
  node_host(caf::actor_system& sys, node_spec spec, node_env env, std::filesystem::path state_dir,
            std::function<bool()> link_up, std::uint64_t seed);
  ~node_host() override;

  // ---- the world's side ------------------------------------------------------
  /// Starts the daemon (first start or after a crash) on the state dir;
  /// false (and traced) when it cannot open it (a disk fault), as a real
  /// daemon exits.
  bool boot(const std::string& token);
  /// The daemon dies at once; workloads keep running, the disk stays.
  void crash();
  /// The machine loses power: the daemon and every workload die at once;
  /// no workload leaves an exit status (cq-shim dies with it). Its next boot
  /// has another boot id.
  void power_loss();
  /// A power loss long enough after the last writes that the kernel wrote
  /// them all back (disk().write_back(): the unsynced `leader` files too),
  /// then unrelated processes of the new boot in the pids and start times of
  /// every leader that was running (both count from the boot on a real
  /// machine; each runs until the next power loss): the next boot must not
  /// take them for its workloads (alloc.json's boot id).
  void power_loss_pids_reused();
  bool up() const { return up_; }
  /// The disk's faults (sim_disk::fault_plan).
  void set_disk_faults(sim_disk::fault_plan f) { disk_.set_faults(std::move(f)); }
  /// The machine's wall clock against the world's (read at the next boot).
  void set_clock_offset(std::int64_t ms) { clock_offset_ms_ = ms; }
  /// Its wall clock's rate (drift), from the next boot.
  void set_clock_rate(double rate) { clock_rate_ = rate; }
  /// The daemon's periodic work, read at its next boot: the heartbeat
  /// interval (the GPU telemetry and the watchdog's peak sampling follow it),
  /// the watchdog's cap-check period, and whether MemAvailable is reported as
  /// the whole memory (node.toml's [capacity] mem_available_bytes, so that a
  /// heartbeat an hour old says what a fresh one would); and how often a
  /// checkpointing workload looks for its yield file.
  struct timing {
    std::int64_t heartbeat_ms = 1000;
    std::uint64_t sample_ms = 1000;
    bool fixed_available = false;
    std::int64_t yield_poll_ms = 1000;
    /// The node's [retention] allocations; 0 = its default (30 days).
    std::int64_t retention_ms = 0;
  };
  void set_timing(const timing& t) { timing_ = t; }
  /// The machine's disk, as the daemon sees it (tests look at what it keeps).
  sim_disk& disk() { return disk_; }
  /// A frame from the coordinator on the current connection.
  void receive(const std::string& bytes) { receive(std::vector<std::string>{bytes}); }
  /// Frames that waited in the node's socket (a partition that kept its
  /// connection): the daemon reads them all at once, as ZeroMQ delivers them.
  void receive(const std::vector<std::string>& frames);
  /// An Xid line in the kernel log.
  void inject_fault(std::int64_t xid);
  /// A process outside cq takes `vram_bytes` on lane `lane` (0 = it ends).
  void outside_gpu_process(int lane, std::uint64_t vram_bytes);
  /// A process outside cq holds the GPU lock probe (true) or lets it go.
  void hold_lock_probe(bool held) { probe_held_ = held; }
  /// Whether the node has a fault latched (its KERNEL-FAULT.json exists).
  bool faulted();
  const node_spec& spec() const { return spec_; }
  std::uint64_t reserved_ram() const;
  std::size_t used_lanes() const;
  /// The holds the daemon reported in its latest heartbeat.
  const std::vector<bus::hold_info>& holds() const { return holds_; }
  /// Why the machine is not idle ("" when it is): a workload or anything it
  /// left behind still runs, or the daemon's latest heartbeat (sent after
  /// `since_ms`) lists an allocation or a hold, or none was sent since.
  std::string busy(std::int64_t since_ms) const;

  // ---- process_host ----------------------------------------------------------
  bus::result<node::leader_id> launch(const node::launch_request& req,
                                      const node::mem_group& group) override;
  bool adopt(const node::leader_id& leader) override;
  std::optional<node::leader_id> find_leader(const std::string& marker) override;
  /// The machine's boot: a power loss starts another.
  std::string boot_id() override;
  void watch(pid_t pid, std::function<void(node::child_exit)> on_exit) override;
  void terminate_group(pid_t pgid) override;
  void kill_group(pid_t pgid) override;
  void kill_tree(pid_t pgid) override { kill_group(pgid); }
  std::vector<std::uint64_t> group_rss(const std::vector<pid_t>& pgids) override;
  std::vector<std::uint64_t> tree_rss(const std::vector<pid_t>& pgids) override {
    return group_rss(pgids);
  }
  node::scan_result cleanup_scan(const node::scan_request& req) override;
  bool when_gone(const std::vector<node::leader_id>& procs, std::function<void()> on_gone) override;
  /// No simulated workload has a terminal.
  node::status write_terminal(const std::filesystem::path&, std::string_view) override {
    return bus::error_info{errc::unavailable, "the terminal is not open"};
  }
  void close() override {}

  // ---- host_probes -----------------------------------------------------------
  std::optional<node::mem_info> memory() override;
  std::uint64_t cpus() override { return spec_.cpus; }
  bus::result<node::memcap_setup> detect_memcap(const node::memory_config& cfg) override;
  bus::result<node::mem_group> create_group(const node::memcap_setup& setup,
                                            const std::string& allocation,
                                            std::optional<std::uint64_t> cap_bytes) override;
  std::optional<std::uint64_t> oom_kills(const node::mem_group& g) override;
  std::optional<std::uint64_t> peak_usage(const node::mem_group& g) override;
  std::optional<std::uint64_t> current_usage(const node::mem_group& g) override;
  node::status remove_group(const node::mem_group& g) override;
  bool remove_leftover_group(const node::mem_group&) override { return true; }
  node::status lock_for_life(const std::filesystem::path&) override { return node::done{}; }
  std::string find_shim() override { return "cq-shim (simulated)"; }
  std::string random_id() override;
  std::unique_ptr<node::gpu_probes> gpu(const node::gpu_config& cfg) override;

  // ---- coordinator_link ------------------------------------------------------
  node::status start(handlers h) override;
  void send(std::string bytes, std::uint64_t tag) override;
  void stop() override { handlers_ = {}; }

private:
  struct process {
    std::string allocation;
    std::string job;
    workload w;
    std::uint64_t start_ticks = 0;
    std::filesystem::path status_file;
    std::filesystem::path yield_file;
    bool running = true;
    bool ours = true;                   ///< a child of the daemon that watches it (not re-adopted)
    bool terming = false;               ///< SIGTERM received (and honoured)
    bool signalled = false;             ///< the daemon sent it SIGTERM or SIGKILL
    bool escapee_alive = false;         ///< a marked process it left behind still runs
    std::int64_t started_ms = 0;        ///< when it started (its RSS grows from there)
    std::int64_t ended_ms = 0;          ///< when its leader ended
    std::int64_t unmarked_until_ms = 0; ///< an unmarked escapee lives until then
    std::int64_t suspect_until_ms = 0;  ///< its unreadable process lives until then
    std::uint64_t gen = 0;              ///< invalidates the end events of an older plan
    std::function<void(node::child_exit)> on_exit;
    std::string group; ///< its cgroup ("" in watchdog mode)
  };
  /// A simulated memory cgroup: its cap, and its OOM-kill counter.
  struct cgroup {
    std::optional<std::uint64_t> cap;
    std::uint64_t oom_kills = 0;
    pid_t pid = 0; ///< the allocation's leader, once launched
  };
  void end(pid_t pid, std::optional<int> code, std::optional<int> signal);
  void end_after(pid_t pid, std::int64_t delay_ms, std::optional<int> code,
                 std::optional<int> signal);
  void poll_yield(pid_t pid);
  /// RSS of `p` at `t_ms`: 10% of its peak at the start, growing linearly to
  /// the peak halfway through its run time.
  static std::uint64_t rss_at(const process& p, std::int64_t t_ms);
  /// The process of the cgroup `g`, or nullptr.
  const process* process_in(const node::mem_group& g) const;
  /// After a power loss: a process of the new boot, with no allocation,
  /// marker or group, in the pid and start time `allocation`'s leader had.
  void stranger_like(const std::string& allocation);
  /// Drops an ended process's record once nothing can ask for it.
  void forget_later(pid_t pid);

  caf::actor_system& sys_;
  node_spec spec_;
  node_env env_;
  std::filesystem::path dir_;
  std::function<bool()> link_up_;
  std::mt19937_64 rng_;
  bool up_ = false;
  std::int64_t clock_offset_ms_ = 0;   ///< set_clock_offset()
  double clock_rate_ = 1.0;            ///< set_clock_rate()
  timing timing_;                      ///< set_timing()
  std::unique_ptr<caf::actor> daemon_; ///< the current daemon (type-erased)
  handlers handlers_;                  ///< the current daemon's link handlers
  std::map<pid_t, process> procs_;     ///< every process ever started here
  pid_t next_pid_ = 1000;
  std::uint64_t boots_ = 0;                           ///< power losses so far: the boot id's number
  std::map<std::string, bus::start_order> orders_;    ///< start orders seen, by allocation
  std::map<std::uint64_t, std::string> exit_reports_; ///< request id -> allocation
  std::map<std::string, pid_t> pid_of_;               ///< allocation -> its leader
  std::vector<bus::hold_info> holds_;                 ///< from the latest heartbeat
  bus::string_list listed_;                           ///< allocations of the latest heartbeat
  std::int64_t heartbeat_ms_ = -1;                    ///< when the latest heartbeat was sent
  // ---- the GPUs ----
  class gpu_side;
  friend class gpu_side;
  std::vector<std::string> klog_;             ///< kernel log lines not read yet
  std::map<int, std::uint64_t> outside_vram_; ///< lane -> VRAM of an outside process
  bool probe_held_ = false;                   ///< the lock probe is held outside cq
  std::map<std::string, cgroup> cgroups_;     ///< by directory
  sim_disk disk_;                             ///< the machine's disk
};

} // namespace cq::sim
