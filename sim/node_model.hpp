#pragma once
// A model of a node daemon: it speaks the real node protocol (frames built
// and parsed by the real codec) and models what the real cq-node does with
// its orders, its children and its state dir. cq-bench drives 64 of them
// over real sockets against a real cq-coordinator. (cq-sim runs the real
// node actors instead: node_host.hpp.) The workload plan it reads from argv
// (workload, parse_workload) is shared with cq-sim.
//
// What it keeps, like the real node (node/include/cq/node/daemon.hpp):
//  1. An allocation is recorded on its disk before its start is acknowledged;
//     a start it already knows is acknowledged and ignored.
//  2. Every allocation ends in one exited report, queued on disk before it is
//     sent and re-sent every second until acknowledged; heartbeats list every
//     allocation held (live, or with an exit not yet acknowledged).
//  3. A stop for an allocation never seen leaves a tombstone (a later start
//     is a no-op) and is reported cancelled.
//  4. A restarted daemon (crash) keeps its disk and re-adopts its children,
//     which kept running; an exit that happened meanwhile is reported then.
//  5. A latched GPU fault stops every GPU allocation (reason fault) and
//     refuses GPU starts (reason refused) until an order clears it.

#include "cq/bus/codec.hpp"
#include "cq/bus/protocol.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace cq::sim {

/// What the workload of an allocation does, read from its argv (the
/// generator writes it there, so it travels through the real store).
struct workload {
  std::int64_t run_ms = 1000;
  int exit_code = 0;
  std::uint64_t rss_bytes = 0;
  bool ignores_term = false;
  bool checkpoints = false; ///< exits 6 soon after a yield order
  int crash_signal = 0;     ///< dies by this signal at run_ms instead
  bool escapee = false;     ///< leaves a marked process behind (cleanup kills it)
  /// Leaves a process behind that dropped the marker and left the process
  /// group: only a cgroup finds it; on a watchdog node it escapes cleanup and
  /// holds its memory until it ends by itself, a minute later.
  bool escapee_unmarked = false;
  std::uint64_t vram_bytes = 0; ///< VRAM it uses on each of its lanes
  bool over_cap = false;        ///< grows past its RAM cap (the cap's OOM kill ends it)
  /// Leaves a process whose environment cannot be read, for this long after
  /// the leader ends (never signalled: cleanup waits, or makes a hold).
  std::int64_t suspect_ms = 0;
};
workload parse_workload(const bus::string_list& argv);
bus::string_list workload_argv(const workload& w, std::uint64_t index);

struct node_spec {
  std::string name;
  std::uint64_t mem_total_bytes = 0;
  std::uint64_t ram_reserve_bytes = 0;
  std::uint64_t cpus = 0;
  int gpus = 0;
  std::uint64_t vram_bytes = 0; ///< per lane (the largest lane's when they differ)
  /// Each lane's VRAM when the lanes differ (a fleet file); empty: every
  /// lane has vram_bytes.
  std::vector<std::uint64_t> lane_vram_bytes;
  bool cgroups = false; ///< memory caps by cgroup v2 (else the watchdog)
  std::uint64_t vram_of(int lane) const {
    return lane >= 0 && static_cast<std::size_t>(lane) < lane_vram_bytes.size()
               ? lane_vram_bytes[static_cast<std::size_t>(lane)]
               : vram_bytes;
  }
  std::vector<std::uint64_t> lane_vram_gib() const {
    std::vector<std::uint64_t> out;
    for (auto b : lane_vram_bytes)
      out.push_back(b >> 30);
    return out;
  }
};

/// What the node does to the world: send a frame, set a timer (a callback
/// at a virtual time), and tell the checkers what runs.
/// A frame a node sends, as its sender already decoded it (node_host does,
/// to follow its heartbeats and exits): the world hands this on at delivery
/// instead of decoding the same bytes again. `request` is empty for a reply,
/// and for a request the coordinator would refuse to decode.
struct decoded_frame {
  bus::frame frame;
  std::optional<bus::coordinator_request> request;
};
/// `bytes` decoded as the coordinator's gateway decodes a frame from a node;
/// null when they are not a frame.
std::shared_ptr<decoded_frame> decode_from_node(const std::string& bytes);

struct node_env {
  std::function<std::int64_t()> now_ms;
  std::function<void(const std::string& bytes)> send; ///< on the current connection
  /// Like send, with the frame decoded (null: it did not decode); when unset,
  /// send is used.
  std::function<void(const std::string& bytes, std::shared_ptr<decoded_frame>)> send_decoded;
  std::function<void(std::int64_t at_ms, std::function<void()>)> at;
  std::function<void(const std::string& line)> trace;
  /// A child starts / ends (checkers).
  std::function<void(const std::string& node, const bus::start_order&)> on_start;
  std::function<void(const std::string& node, const std::string& allocation,
                     const std::string& job)>
      on_end;
  /// The coordinator acknowledged the exit of `allocation` (checkers).
  std::function<void(const std::string& allocation)> on_exit_acked;
};

class node_model {
public:
  node_model(node_spec spec, node_env env);

  /// The daemon starts (first start or after a crash); keeps the disk.
  void boot(const std::string& token);
  /// The daemon dies at once: timers and volatile state are gone; children
  /// keep running and the disk keeps what was written.
  void crash();
  bool up() const { return up_; }
  /// A frame from the coordinator on the current connection.
  void receive(const std::string& bytes);
  /// Latches a GPU fault (an Xid line in the kernel log).
  void inject_fault(std::int64_t xid);
  bool faulted() const { return fault_.has_value(); }
  const node_spec& spec() const { return spec_; }
  /// Live allocations (children running or being stopped).
  std::size_t live() const;
  /// Sum of the RAM caps and of the RSS of live allocations.
  std::uint64_t reserved_ram() const;
  std::uint64_t used_ram() const;
  std::size_t used_lanes() const;

private:
  struct child {
    bus::start_order order;
    workload w;
    std::int64_t started_ms = 0;
    std::int64_t ends_ms = 0;                    ///< when the workload ends by itself
    bool running = true;                         ///< the process exists
    bool stop_ordered = false;                   ///< a stop came (reason cancelled)
    bool yield_ordered = false;                  ///< a yield came (exit 6 is a checkpoint)
    bus::reason stop_reason = bus::reason::none; ///< cancelled|fault|timeout
    std::uint64_t gen = 0;                       ///< invalidates timers of an older run
  };
  // ---- the disk: survives crash() -------------------------------------------
  std::map<std::string, child> children_;           ///< by allocation id
  std::map<std::uint64_t, bus::report_req> outbox_; ///< unacknowledged reports by seq
  std::uint64_t next_seq_ = 1;
  std::set<std::string> tombstones_;
  std::set<std::string> done_; ///< allocations that ended here (exit.json)
  std::optional<bus::fault_info> fault_;
  std::string daemon_id_;
  // ---- volatile -------------------------------------------------------------
  node_spec spec_;
  node_env env_;
  bool up_ = false;
  std::string token_;
  std::uint64_t boot_ = 0;     ///< timers of an earlier boot do nothing
  std::uint64_t next_rid_ = 1; ///< request ids on the wire
  std::int64_t boot_ms_ = 0;   ///< the node's clock on the wire: this boot's start...
  std::uint64_t beat_ = 0;     ///< ...and the last heartbeat's number

  void heartbeat();
  void resend();
  void queue_report(bus::report_req r);
  void send_report(const bus::report_req& r);
  void answer(std::uint64_t id, bool ok, errc code = errc::internal, std::string msg = {});
  void on_start(std::uint64_t id, const bus::start_order& o);
  void on_stop(std::uint64_t id, const bus::stop_order& o);
  void on_yield(std::uint64_t id, const bus::yield_order& o);
  void launch(const std::string& alloc);
  void terminate(const std::string& alloc, std::uint64_t grace_ms, bus::reason reason);
  void finish(const std::string& alloc, std::optional<std::int64_t> rc,
              std::optional<std::int64_t> sig);
  void after(std::int64_t delay_ms, std::function<void()> f);
};

} // namespace cq::sim
