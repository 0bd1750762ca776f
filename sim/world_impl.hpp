#pragma once
// The world's parts, shared by sim/world.cpp (the loop, the coordinator's
// lifecycle), sim/network.cpp, sim/workload.cpp (generator, trace, clients),
// sim/faults.cpp and sim/checkers.cpp. Internal to cq-sim.
#include "world.hpp"

#include "coordinator.hpp"
#include "node_host.hpp"
#include "node_model.hpp"
#include "policy/placement.hpp"
#include "policy/transitions.hpp"
#include "store.hpp"
#include "store/store.hpp"

#include "cq/bus/codec.hpp"
#include "cq/bus/format.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <fmt/format.h>
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace cq::sim::detail {

using namespace cq::actors;
namespace fs = std::filesystem;

/// Uniform integer in [lo, hi] from the engine alone (portable: no
/// std::uniform_int_distribution, whose output differs between libraries).
inline std::int64_t uniform(std::mt19937_64& g, std::int64_t lo, std::int64_t hi) {
  if (hi <= lo)
    return lo;
  return lo + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(hi - lo + 1));
}

inline bool chance(std::mt19937_64& g, double p) {
  return p > 0 && static_cast<double>(g() >> 11) * 0x1.0p-53 < p;
}

/// Switches on the defect `name` (actors::config::defects); false if unknown.
bool set_defect(config::defect_flags& d, const std::string& name);

/// The reply type of each request the simulated people send (a client
/// decodes a reply by the request it made, as `cq` does).
template <class Req>
struct reply_of {
  using type = void;
};
template <>
struct reply_of<bus::submit_req> {
  using type = bus::submit_rep;
};
template <>
struct reply_of<bus::cancel_req> {
  using type = bus::cancel_rep;
};
template <>
struct reply_of<bus::ls_req> {
  using type = bus::ls_rep;
};
template <>
struct reply_of<bus::move_req> {
  using type = bus::move_rep;
};
template <>
struct reply_of<bus::preempt_req> {
  using type = bus::preempt_rep;
};
template <>
struct reply_of<bus::node_invite_req> {
  using type = bus::node_invite_rep;
};
template <>
struct reply_of<bus::node_join_req> {
  using type = bus::node_join_rep;
};
template <>
struct reply_of<bus::node_approve_req> {
  using type = bus::node_rep;
};
template <>
struct reply_of<bus::node_clear_fault_req> {
  using type = bus::node_rep;
};
template <>
struct reply_of<bus::release_req> {
  using type = bus::node_rep;
};

/// The simulated people: the Owner sets up nodes and releases holds; the
/// workload's jobs belong to two Submitters and an Operator, in turn.
struct person {
  const char* name;
  const char* role;
  const char* token;
};
inline constexpr person owner_person{"owner", "owner", "owner-token"};
inline constexpr person people[] = {{"alice", "submitter", "alice-token"},
                                    {"bob", "submitter", "bob-token"},
                                    {"ops", "operator", "ops-token"}};

/// One job of the workload.
struct job_plan {
  std::int64_t at_ms = 0;
  bus::job_spec spec;
  workload w;
  int level = 1;
  int after = -1; ///< index of an earlier job it depends on
  std::optional<std::int64_t> cancel_at_ms;
  std::string owner; ///< who submits it ("": the people in turn)
  int line = 0;      ///< its line in the workload file (0: generated)
};

/// The nodes of a fleet file's text (docs/operations.md, "Simulation");
/// throws std::runtime_error naming the file, the entry and the field.
std::vector<node_spec> parse_fleet(const std::string& text, const std::string& file);

/// A size (bytes, or "16G", "512MiB") or a duration (ms, or "2h", "90m",
/// "1h30m", "500ms") in a fleet or workload file; throws naming `what`.
std::uint64_t size_field(const nlohmann::json& v, const std::string& what);
std::uint64_t duration_field(const nlohmann::json& v, const std::string& what);

struct sim_node {
  std::unique_ptr<node_host> model; ///< the machine, running the real node daemon
  std::string token;
  std::uint64_t conn = 0; ///< connection generation: the peer is name#conn
  bool partitioned = false;
  /// The partition keeps the connection (TCP survives it): frames both ways
  /// wait in the sockets and arrive all at once when it ends. Otherwise the
  /// connection breaks: frames are lost and the node reconnects.
  bool keeps_connection = false;
  std::vector<std::string> backlog_in;  ///< toward the node, for connection `conn`
  std::vector<std::string> backlog_out; ///< toward the coordinator, for connection `conn`
  /// Workloads running here (checkers): allocation -> its start order.
  std::map<std::string, bus::start_order> live;
  std::int64_t fifo_in = 0, fifo_out = 0; ///< last delivery times, per direction
  /// Frames toward the node that arrive at one instant, for one connection:
  /// the node reads them at one wake-up, as from its socket (to_node).
  std::map<std::pair<std::int64_t, std::string>, std::shared_ptr<std::vector<std::string>>>
      arriving;
  std::optional<std::int64_t> fault_seen_ms; ///< the coordinator got a heartbeat with the fault
  std::int64_t clock_offset_ms = 0;          ///< its wall clock against the coordinator's
  std::int64_t clock_ppm = 0;                ///< its wall clock's drift
  bool booted = false;                       ///< its daemon started at least once
  /// name#conn, made once per connection (it is compared on every frame).
  const std::string& peer() const {
    if (peer_conn_ != conn || peer_.empty()) {
      peer_ = fmt::format("{}#{}", name, conn);
      peer_conn_ = conn;
    }
    return peer_;
  }
  std::string name;
  mutable std::string peer_; ///< peer() of connection peer_conn_
  mutable std::uint64_t peer_conn_ = 0;
  /// A new connection: its frames do not queue behind the old one's.
  void reconnect() {
    ++conn;
    fifo_in = fifo_out = 0;
    backlog_in.clear();
    backlog_out.clear();
  }
};

class world;

struct link_state {
  world* w = nullptr;
  std::uint64_t gen = 0;
  std::string node;
  static inline const char* name = "sim.link";
};

class world {
public:
  explicit world(const options& opt);
  ~world();
  result run();

  // Called by the link and bridge actors of incarnation `gen`.
  void order_out(std::uint64_t gen, const std::string& node, std::uint64_t id,
                 const std::string& peer, const bus::node_order& o);
  void reply_out(std::uint64_t gen, const std::string& peer, std::string bytes);

private:
  options opt_;
  std::mt19937_64 rng_;
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  caf::actor_clock::time_point t0_;
  fs::path dir_;
  /// The coordinator's store, on cq-sim's file system (vfs.hpp); null while
  /// the coordinator is down (a crash closes it, a start reopens it).
  std::shared_ptr<coord::store> db_;
  store_actor real_store_; ///< the current incarnation's store actor, behind the wrapper
  /// World actions that run before the next actor message (a crash right
  /// after a commit).
  std::deque<std::function<void()>> now_;
  policy::transition_observer prev_observer_; ///< restored when the world ends
  std::shared_ptr<store_plan> plan_ = std::make_shared<store_plan>();
  config::defect_flags defects_;
  // The coordinator's current incarnation.
  context_ptr ctx_;
  bridge_actor bridge_; ///< the production bridge, sending into the network
  std::vector<caf::actor> links_;
  std::uint64_t gen_ = 0;
  bool coord_up_ = false;
  bool crash_pending_ = false;
  std::uint64_t next_id_ = 0, next_order_ = 0;
  // Nodes, workload, clients.
  std::vector<sim_node> nodes_;
  std::vector<job_plan> jobs_;
  std::vector<std::string> job_ids_; ///< acknowledged id per workload index ("" = none)
  // Looked up on every start and placement pass: hashed (never iterated in order).
  std::unordered_map<std::string, int> index_of_; ///< job id -> workload index
  std::unordered_map<std::string, std::int64_t> acked_at_;
  /// acked_at_ by workload index (-1: not acknowledged): the serving-order
  /// check reads it for every queued job of every pass.
  std::vector<std::int64_t> acked_ms_;
  std::set<std::string> started_; ///< jobs that started at least once
  /// Every allocation that started, per job: (node index, allocation).
  std::map<std::string, std::vector<std::pair<std::size_t, std::string>>> starts_;
  int pending_submits_ = 0;
  // The outcome oracle and the checkers of what clients and pollers observe.
  std::unordered_map<std::string, std::size_t> plan_of_; ///< client job id -> workload index
  std::vector<std::string> dep_sent_; ///< the dependency a submit named ("" = none)
  /// When each workload line's submit was first sent (-1: not yet): a job
  /// acknowledged before another was sent is ahead of it in its level.
  std::vector<std::int64_t> first_sent_;
  std::set<std::size_t> moved_; ///< workload indexes whose owner sent a move
  std::set<std::size_t> cancel_sent_;
  std::set<std::string> disk_failed_allocs_; ///< allocations whose state a disk fault hit ///<
                                             ///< workload indexes whose cancel was sent
  std::map<std::string, std::int64_t> cancel_acked_; ///< job id -> first acknowledged cancel
  struct terminal_seen {
    job_state state;
    bus::reason reason;
    std::int64_t at_ms;
    std::uint64_t gen; ///< the coordinator's incarnation then
  };
  std::map<std::string, terminal_seen> committed_end_; ///< each job's first committed end
  std::map<std::string, terminal_seen> listed_end_;    ///< each job's first listed end
  bool draining_ = false;                              ///< every job ended: waiting for idle nodes
  std::int64_t drain_from_ms_ = 0, drain_end_ms_ = 0;
  // World events: time -> callbacks (insertion order among equal times).
  std::multimap<std::int64_t, std::function<void()>> events_;
  // Checkers.
  std::map<std::string, std::set<std::string>> live_by_job_;
  std::set<std::string> first_starts_; ///< allocations whose start was sent
  std::set<std::string> first_yields_; ///< allocations asked to yield
  result res_;
  bool stopped_ = false;
  bool liveness_ = false;
  std::int64_t fault_end_ms_ = 0, deadline_ms_ = 0;
  std::int64_t last_sample_ms_ = 0;
  double ram_area_ = 0, gpu_area_ = 0, cpu_area_ = 0;
  std::uint64_t ram_total_ = 0, lanes_total_ = 0, cpus_total_ = 0;
  std::map<std::string, std::uint64_t> live_cpus_;           ///< CPUs of each live allocation
  std::uint64_t ram_now_ = 0, lanes_now_ = 0, cpus_now_ = 0; ///< held by live allocations now
  result::sample_row bucket_;                                ///< the minute being summed
  /// Workload indexes acknowledged and neither started nor ended, by level
  /// (the report's backfilled starts).
  std::array<std::set<int>, 3> waiting_;
  /// Each job's first start: when, and on which node (the per-job report).
  std::map<std::string, std::pair<std::int64_t, std::size_t>> first_start_;
  std::deque<std::string> tail_;
  /// The latest trace lines, from which a failure's story is picked.
  std::deque<std::string> history_;
  static constexpr std::size_t history_lines = 200'000;
  static constexpr std::size_t story_lines = 80;
  /// How long after every job ended each node has to be idle (not_idle):
  /// beyond a minute-long escapee and the operator's 30 s rounds of releases.
  /// In a study, at least three heartbeats (the last one lists nothing).
  std::int64_t drain_ms_ = 180'000;
  /// The nodes' heartbeat interval (options::heartbeat_ms).
  std::int64_t heartbeat_ms_ = 1000;
  /// How often the poller lists every job (checkers outcome, terminal_changed):
  /// every 30 s, or every week in a study (each listing reads every job).
  std::int64_t poll_every_ms_ = 30'000;
  std::uint64_t hash_ = 1469598103934665603ull;

  std::int64_t now() const;
  void at(std::int64_t t_ms, std::function<void()> f) { events_.emplace(t_ms, std::move(f)); }
  void trace(const std::string& line);
  void mix(std::string_view bytes);
  /// A checker failed; `subjects` (a job, its allocations, a node) pick the
  /// trace lines of the failure's story.
  void violation(const std::string& name, const std::string& msg,
                 const std::vector<std::string>& subjects = {});
  /// Adds the usage since the last change to the areas and the minute rows.
  void sample();

  /// Checker serving_order, on every placement pass (context::observe_pass).
  void check_pass(const policy::cluster_view& c, policy::queue_ref queue, const policy::plan& p);
  void start_coordinator();
  /// The coordinator's process dies (`power`: its machine loses power, and
  /// the store's unsynced writes with it).
  void crash_coordinator(const std::string& why, bool power = false);
  /// Opens the store (at the start of an incarnation).
  bool open_store();
  /// Ends the dead incarnation's store actor, so its connection closes
  /// without a checkpoint; then the power loss, if any.
  void close_store(bool power);
  /// A due world event or timer fired between two actor messages (fault
  /// kind `anywhere`); false when none was due.
  bool fire_due();
  /// The virtual time the message `job` is about to handle costs.
  std::int64_t cost_of(caf::resumable* job);
  /// Ends every actor of the coordinator's incarnation at once (kill -9).
  void kill_incarnation();
  /// A person's request, through the real codec and the production bridge
  /// (as the gateway hands it over); `done` gets the decoded reply, or
  /// nothing when it was lost (a crash, no answer within 30 s).
  void call(bus::coordinator_request body, std::function<void(std::optional<api_reply>)> done,
            const person& who = owner_person);
  /// A reply frame for a person's call.
  void client_reply(const std::string& bytes);
  /// Every call in flight is lost (the coordinator's process died).
  void lose_calls();
  struct pending_call {
    std::function<void(std::optional<api_reply>)> done;
    std::function<api_reply(const bus::frame&)> decode;
  };
  std::map<std::uint64_t, pending_call> calls_;
  std::uint64_t next_call_ = 0;
  static inline const std::string client_peer = "people";
  void setup_nodes();
  void add_node(node_spec s);
  /// A study's workload: a GPU cluster's jobs over weeks (study.cpp).
  void generate_study();
  /// Who submits workload job `k`: its owner, or the people in turn.
  person who_of(std::size_t k) const;
  /// Gives each workload owner a submitter's token (before the coordinator
  /// starts); throws for a name that cannot be one.
  void register_owners();
  /// Each workload owner's token (study.cpp): name -> token.
  std::map<std::string, std::string> owner_tokens_;
  /// The per-job report and its summary (options::report_file), as JSON.
  std::string report_json(double wall_s) const;
  void boot_node(std::size_t i);
  void generate();
  void load_workload();
  void submit(std::size_t k, int tries);
  std::string client_job_id(std::size_t k) const;
  void cancel(std::size_t k, int tries);
  /// Another submitter tries to cancel workload job `k` (role_bypassed).
  void intrude(std::size_t k);
  void schedule_faults();
  void heal();
  /// The operator releases every hold the nodes report.
  void release_holds();
  /// Liveness phase: release_holds every 30 s.
  void operator_rounds();
  void to_node(std::size_t i, std::string bytes, const std::string& peer);
  /// A frame from node `i` into the network; `decoded`, when the node's
  /// host decoded it already, travels with it (to_coordinator).
  void from_node(std::size_t i, std::string bytes,
                 std::shared_ptr<decoded_frame> decoded = nullptr);
  /// A frame of connection `peer` reaches the coordinator.
  void to_coordinator(std::size_t i, const std::string& peer, const std::string& bytes,
                      std::shared_ptr<decoded_frame> decoded = nullptr);
  std::int64_t delay(std::int64_t& fifo);
  void on_start(std::size_t i, const bus::start_order& o);
  void on_end(std::size_t i, const std::string& alloc, const std::string& job);
  /// The workload index of job `job` (acknowledged, or by its client job id).
  std::optional<std::size_t> plan_index(const std::string& job) const;
  /// A job and every allocation of it that started: a failure's subjects.
  std::vector<std::string> subjects_of(const std::string& job) const;
  void check_listing();
  /// One page of check_listing's listing; `missing` shrinks by what it lists.
  void list_page(std::uint64_t gen, std::shared_ptr<std::set<std::string>> missing,
                 std::optional<std::uint64_t> cursor);
  /// The outcome oracle: why `j`'s terminal state is not one its workload
  /// script permits, or nullopt (also for a job the workload does not know).
  std::optional<std::string> forbidden_outcome(const bus::job_info& j) const;
  /// A job's state as committed (`committed`) or as listed: the checkers
  /// outcome, terminal_changed and cancel_lost.
  void observe(const bus::job_info& j, bool committed);
  /// Lists every job (checkers terminal_changed, outcome): every 30 s when
  /// `again`, else once (after a restart).
  void poll_jobs(bool again, std::optional<std::uint64_t> cursor = std::nullopt);
  /// Checker not_idle: "" when every node is idle, else why one is not.
  std::string busy_node() const;
  /// A partition ends: the frames that waited arrive, or the connection broke.
  void end_partition(std::size_t i);
  bool done() const;
};

/// A node link of incarnation `gen`: orders go into the world's network.
node_link_actor::behavior_type sim_link(node_link_actor::stateful_pointer<link_state> self,
                                        world* w, std::uint64_t gen, std::string node);

} // namespace cq::sim::detail
