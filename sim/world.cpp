// cq-sim's world (see world.hpp): the scheduler loop, the network, the
// coordinator's lifecycle, the clients, the faults and the checkers.
#include "world.hpp"

#include "coordinator.hpp"
#include "node_model.hpp"
#include "store.hpp"
#include "store/store.hpp"

#include "cq/bus/codec.hpp"
#include "cq/bus/format.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

namespace cq::sim {

using namespace cq::actors;
namespace fs = std::filesystem;

// ---- fault mixes --------------------------------------------------------------

fault_mix fault_mix::none() {
  return {};
}

fault_mix fault_mix::all() {
  fault_mix f;
  f.drop = 0.01, f.dup = 0.01, f.reorder = true, f.partitions = true, f.reconnects = true;
  f.node_crashes = true, f.coordinator_crashes = true, f.commit_fail = 0.002;
  f.child_crashes = true, f.gpu_faults = true, f.ignore_term = true;
  return f;
}

namespace {

/// Uniform integer in [lo, hi] from the engine alone (portable: no
/// std::uniform_int_distribution, whose output differs between libraries).
std::int64_t uniform(std::mt19937_64& g, std::int64_t lo, std::int64_t hi) {
  if (hi <= lo)
    return lo;
  return lo + static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(hi - lo + 1));
}

bool chance(std::mt19937_64& g, double p) {
  return p > 0 && static_cast<double>(g() >> 11) * 0x1.0p-53 < p;
}

} // namespace

fault_mix fault_mix::random(std::mt19937_64& g) {
  fault_mix f;
  // Swarm testing: each kind is on or off on its own, so that some seeds see
  // one fault class alone and others see many together.
  if (chance(g, 0.5))
    f.drop = static_cast<double>(uniform(g, 1, 50)) / 1000;
  if (chance(g, 0.5))
    f.dup = static_cast<double>(uniform(g, 1, 50)) / 1000;
  f.reorder = chance(g, 0.3);
  f.partitions = chance(g, 0.5);
  f.reconnects = chance(g, 0.5);
  f.node_crashes = chance(g, 0.5);
  f.coordinator_crashes = chance(g, 0.5);
  if (chance(g, 0.4))
    f.commit_fail = static_cast<double>(uniform(g, 1, 20)) / 1000;
  f.child_crashes = chance(g, 0.5);
  f.gpu_faults = chance(g, 0.5);
  f.ignore_term = chance(g, 0.5);
  return f;
}

std::string fault_mix::describe() const {
  std::string s = fmt::format("drop={} dup={}", drop, dup);
  auto flag = [&](bool on, const char* name) {
    if (on)
      s += fmt::format(" {}", name);
  };
  flag(reorder, "reorder");
  flag(partitions, "partitions");
  flag(reconnects, "reconnects");
  flag(node_crashes, "node_crashes");
  flag(coordinator_crashes, "coordinator_crashes");
  if (commit_fail > 0)
    s += fmt::format(" commit_fail={}", commit_fail);
  flag(child_crashes, "child_crashes");
  flag(gpu_faults, "gpu_faults");
  flag(ignore_term, "ignore_term");
  return s;
}

std::vector<std::string> defect_names() {
  return {
      "ignore_fault_latch",       "ack_submit_before_commit",  "forget_lanes",      "forget_ram",
      "requeue_live_on_recovery", "forget_queued_on_recovery", "drop_exit_reports", "starve_low",
      "reconcile_by_arrival"};
}

namespace {

bool set_defect(config::defect_flags& d, const std::string& name) {
  std::map<std::string, bool*> m{{"ignore_fault_latch", &d.ignore_fault_latch},
                                 {"ack_submit_before_commit", &d.ack_submit_before_commit},
                                 {"forget_lanes", &d.forget_lanes},
                                 {"forget_ram", &d.forget_ram},
                                 {"requeue_live_on_recovery", &d.requeue_live_on_recovery},
                                 {"forget_queued_on_recovery", &d.forget_queued_on_recovery},
                                 {"drop_exit_reports", &d.drop_exit_reports},
                                 {"starve_low", &d.starve_low},
                                 {"reconcile_by_arrival", &d.reconcile_by_arrival}};
  auto i = m.find(name);
  if (i == m.end())
    return false;
  *i->second = true;
  return true;
}

using deliver_atom = caf::atom_constant<caf::atom("deliver")>;

/// One job of the workload.
struct job_plan {
  std::int64_t at_ms = 0;
  bus::job_spec spec;
  workload w;
  int level = 1;
  int after = -1; ///< index of an earlier job it depends on
  std::optional<std::int64_t> cancel_at_ms;
};

struct sim_node {
  std::unique_ptr<node_model> model;
  std::string token;
  std::uint64_t conn = 0; ///< connection generation: the peer is name#conn
  bool partitioned = false;
  std::int64_t fifo_in = 0, fifo_out = 0;    ///< last delivery times, per direction
  std::optional<std::int64_t> fault_seen_ms; ///< the coordinator got a heartbeat with the fault
  std::string peer() const;
  std::string name;
  /// A new connection: its frames do not queue behind the old one's.
  void reconnect() {
    ++conn;
    fifo_in = fifo_out = 0;
  }
};

std::string sim_node::peer() const {
  return fmt::format("{}#{}", name, conn);
}

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
  std::shared_ptr<coord::store> db_;
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
  std::vector<std::string> job_ids_;    ///< acknowledged id per workload index ("" = none)
  std::map<std::string, int> index_of_; ///< job id -> workload index
  std::map<std::string, std::int64_t> acked_at_;
  std::set<std::string> started_; ///< jobs that started at least once
  int pending_submits_ = 0;
  // World events: time -> callbacks (insertion order among equal times).
  std::multimap<std::int64_t, std::function<void()>> events_;
  // Checkers.
  std::map<std::string, std::set<std::string>> live_by_job_;
  std::set<std::string> first_starts_; ///< allocations whose start was sent
  result res_;
  bool stopped_ = false;
  bool liveness_ = false;
  std::int64_t fault_end_ms_ = 0, deadline_ms_ = 0;
  std::int64_t last_sample_ms_ = 0;
  double ram_area_ = 0, gpu_area_ = 0, cpu_area_ = 0;
  std::uint64_t ram_total_ = 0, lanes_total_ = 0, cpus_total_ = 0;
  std::map<std::string, std::uint64_t> live_cpus_; ///< CPUs of each live allocation
  result::sample_row bucket_;                      ///< the minute being summed
  std::deque<std::string> tail_;
  std::uint64_t hash_ = 1469598103934665603ull;

  std::int64_t now() const;
  void at(std::int64_t t_ms, std::function<void()> f) { events_.emplace(t_ms, std::move(f)); }
  void trace(const std::string& line);
  void mix(std::string_view bytes);
  void violation(const std::string& name, const std::string& msg);
  void sample();

  void start_coordinator();
  void crash_coordinator(const std::string& why);
  void call(bus::coordinator_request body, std::function<void(std::optional<api_reply>)> done);
  void setup_nodes();
  void boot_node(std::size_t i);
  void generate();
  void load_workload();
  void submit(std::size_t k, int tries);
  void cancel(std::size_t k, int tries);
  void schedule_faults();
  void heal();
  void to_node(std::size_t i, std::string bytes, const std::string& peer);
  void from_node(std::size_t i, std::string bytes);
  std::int64_t delay(std::int64_t& fifo);
  void on_start(std::size_t i, const bus::start_order& o);
  void check_listing();
  bool done() const;
};

node_link_actor::behavior_type sim_link(node_link_actor::stateful_pointer<link_state> self,
                                        world* w, std::uint64_t gen, std::string node) {
  self->state.w = w, self->state.gen = gen, self->state.node = std::move(node);
  return {
      [=](order_atom, std::uint64_t id, const std::string& peer, const bus::node_order& o) {
        self->state.w->order_out(self->state.gen, self->state.node, id, peer, o);
      },
  };
}

world::world(const options& opt) : opt_(opt), rng_(opt.seed) {
  cfg_.set("scheduler.policy", caf::atom("testing"));
  cfg_.set("logger.verbosity", caf::atom("quiet"));
  sys_ = std::make_unique<caf::actor_system>(cfg_);
  sys_->await_actors_before_shutdown(false);
  sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
  t0_ = sched_->clock().now();
  // SQLite in memory-backed storage when there is some: commits are cheap.
  auto base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  auto tmpl = (base / "cq-sim-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  dir_ = ::mkdtemp(buf.data());
  db_ = std::make_shared<coord::store>((dir_ / "cq.db").string());
  coord::init_owner(*db_, "owner", "owner-token", 1'700'000'000'000);
  for (auto& d : opt_.defects)
    if (!set_defect(defects_, d))
      throw std::runtime_error("unknown defect: " + d);
}

world::~world() {
  if (ctx_) {
    caf::anon_send_exit(ctx_->api, caf::exit_reason::kill);
    caf::anon_send_exit(ctx_->scheduler, caf::exit_reason::kill);
    caf::anon_send_exit(ctx_->store, caf::exit_reason::kill);
  }
  for (auto& l : links_)
    caf::anon_send_exit(l, caf::exit_reason::kill);
  if (bridge_)
    caf::anon_send_exit(bridge_, caf::exit_reason::kill);
  sched_->run();
  ctx_.reset();
  sys_.reset();
  db_.reset();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::int64_t world::now() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(sched_->clock().now() - t0_).count();
}

void world::mix(std::string_view bytes) {
  for (unsigned char c : bytes)
    hash_ = (hash_ ^ c) * 1099511628211ull;
}

void world::trace(const std::string& line) {
  auto l = fmt::format("{:>10.3f} {}", static_cast<double>(now()) / 1000, line);
  mix(l);
  if (opt_.verbose)
    fmt::print("{}\n", l);
  tail_.push_back(std::move(l));
  if (tail_.size() > opt_.tail)
    tail_.pop_front();
}

void world::violation(const std::string& name, const std::string& msg) {
  if (!res_.ok)
    return;
  trace(fmt::format("VIOLATION {}: {}", name, msg));
  res_.ok = false;
  res_.violation = name;
  res_.message = msg;
  res_.tail.assign(tail_.begin(), tail_.end());
  stopped_ = true;
}

// ---- the coordinator ------------------------------------------------------------

void world::start_coordinator() {
  ++gen_;
  context c;
  c.epoch_ms = 1'700'000'000'000 + now();
  c.steady = sched_->clock().now();
  c.new_id = [this] { return fmt::format("a{}", ++next_id_); };
  c.new_token = [this] { return fmt::format("t{}-{}", ++next_id_, rng_()); };
  c.new_invite_code = [this] { return fmt::format("i{}-{}", ++next_id_, rng_()); };
  c.new_order_id = [this] { return ++next_order_; };
  c.cfg.defects = defects_;
  auto gen = gen_;
  c.fatal = [this, gen](const std::string& why) {
    if (gen != gen_ || crash_pending_)
      return;
    trace(fmt::format("coordinator stops: {}", why));
    crash_pending_ = true;
    // Production ends the process 300 ms later (coordinator/main.cpp).
    at(now() + 300, [this, gen] {
      if (gen == gen_ && coord_up_)
        crash_coordinator("fatal");
      at(now() + uniform(rng_, 500, 3000), [this] {
        if (!coord_up_)
          start_coordinator();
      });
    });
  };
  c.make_link = [this, gen](caf::actor_system& s, const std::string& name, node_actor) {
    auto l = s.spawn(sim_link, this, gen, name);
    links_.push_back(caf::actor_cast<caf::actor>(l));
    return l;
  };
  coord::spawn_options so;
  so.detached_store = false;
  auto plan = plan_;
  so.wrap_store = [plan](caf::actor_system& s, store_actor real) {
    return spawn_faulty_store(s, real, plan);
  };
  ctx_ = coord::spawn_coordinator(*sys_, db_, std::move(c), so);
  bridge_ = coord::spawn_bridge(
      *sys_,
      [this, gen](const std::string& peer, std::string bytes) {
        reply_out(gen, peer, std::move(bytes));
      },
      ctx_->api);
  coord_up_ = true;
  crash_pending_ = false;
  trace(fmt::format("coordinator starts (incarnation {})", gen));
  // Every node's connection is new (the ROUTER socket is).
  for (auto& n : nodes_) {
    n.reconnect();
    n.fault_seen_ms.reset();
  }
  if (gen > 1)
    check_listing();
}

void world::crash_coordinator(const std::string& why) {
  if (!coord_up_)
    return;
  trace(fmt::format("coordinator crashes ({})", why));
  ++res_.faults["coordinator_crash"];
  coord_up_ = false;
  ++gen_; // every effect of the old incarnation is dropped at the boundary
  caf::anon_send_exit(ctx_->api, caf::exit_reason::kill);
  caf::anon_send_exit(ctx_->scheduler, caf::exit_reason::kill);
  caf::anon_send_exit(ctx_->store, caf::exit_reason::kill);
  caf::anon_send_exit(bridge_, caf::exit_reason::kill);
  for (auto& l : links_)
    caf::anon_send_exit(l, caf::exit_reason::kill);
  links_.clear();
  for (auto& n : nodes_)
    n.fault_seen_ms.reset();
}

/// Checker job_missing: a restarted coordinator lists every acknowledged job.
void world::check_listing() {
  auto acked = acked_at_.size();
  bus::ls_req r;
  r.all = true;
  r.limit = 1;
  call(r, [this, acked](std::optional<api_reply> rep) {
    if (!rep)
      return; // crashed again meanwhile
    auto* ls = std::get_if<bus::ls_rep>(&rep->body);
    if (!ls)
      return;
    auto total = ls->total.value_or(0);
    if (total < acked)
      violation("job_missing", fmt::format("after a restart the coordinator lists {} jobs; {} "
                                           "were acknowledged",
                                           total, acked));
  });
}

void world::call(bus::coordinator_request body,
                 std::function<void(std::optional<api_reply>)> done) {
  if (!coord_up_) {
    at(now() + 1, [done] { done(std::nullopt); });
    return;
  }
  auto gen = gen_;
  auto api = ctx_->api;
  sys_->spawn([this, gen, api, body = std::move(body), done](caf::event_based_actor* self) {
    self->request(api, std::chrono::seconds(30), api_request{"client", 1, "owner-token", body})
        .then(
            [this, gen, done](const api_reply& r) {
              if (gen == gen_ && coord_up_)
                done(r);
              else
                done(std::nullopt);
            },
            [done](caf::error&) { done(std::nullopt); });
  });
}

// ---- the network --------------------------------------------------------------

// The network, per connection and direction:
//  - frames arrive after a seeded delay (sometimes a slow moment of up to
//    half a second), in order;
//  - a frame may be lost (a full pipe, a connection that breaks with it in
//    flight) or arrive twice (drop, dup); with `reorder` a frame may overtake
//    earlier ones, and a duplicate may arrive after newer frames;
//  - after a reconnect, frames the old connection still carried toward the
//    coordinator may arrive after the new connection's first ones (reorder);
//    what it carried toward the node is lost;
//  - a partition loses everything both ways while it lasts.
// TCP under ZeroMQ never reorders within a connection; cq does not rely on
// that (node_actor.cpp, invariant 3), and the simulator checks it does not.
std::int64_t world::delay(std::int64_t& fifo) {
  auto d = uniform(rng_, 0, 20);
  if (chance(rng_, 0.01))
    d += uniform(rng_, 50, 500); // a slow moment
  auto t = now() + d;
  if (!opt_.faults.reorder || !chance(rng_, 0.2))
    t = std::max(t, fifo);
  fifo = std::max(fifo, t);
  return t;
}

void world::order_out(std::uint64_t gen, const std::string& node, std::uint64_t id,
                      const std::string& peer, const bus::node_order& o) {
  if (gen != gen_ || !coord_up_)
    return;
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](auto& n) { return n.name == node; });
  if (it == nodes_.end())
    return;
  auto i = static_cast<std::size_t>(it - nodes_.begin());
  if (auto* s = std::get_if<bus::start_order>(&o)) {
    // Checker latch_bypassed.
    // Only a new placement counts: re-sends of an allocation's start are state.
    bool fresh = first_starts_.insert(s->allocation).second;
    if (fresh && s->lanes && !s->lanes->empty() && it->fault_seen_ms &&
        now() - *it->fault_seen_ms > 2000)
      violation("latch_bypassed",
                fmt::format("GPU start of job {} sent to {} {} ms after its fault was reported",
                            s->job, node, now() - *it->fault_seen_ms));
  }
  // An operator's clear lifts the latch as soon as the node takes it.
  if (std::holds_alternative<bus::clear_fault_order>(o))
    it->fault_seen_ms.reset();
  trace(fmt::format("coord -> {} {} #{}", peer,
                    std::visit([](auto& x) { return std::string(x.op); }, o), id));
  to_node(i, bus::encode_node_order(id, o), peer);
}

void world::reply_out(std::uint64_t gen, const std::string& peer, std::string bytes) {
  if (gen != gen_ || !coord_up_)
    return;
  auto hash = peer.find('#');
  auto name = peer.substr(0, hash);
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](auto& n) { return n.name == name; });
  if (it == nodes_.end())
    return;
  to_node(static_cast<std::size_t>(it - nodes_.begin()), std::move(bytes), peer);
}

void world::to_node(std::size_t i, std::string bytes, const std::string& peer) {
  auto& n = nodes_[i];
  if (n.peer() != peer || n.partitioned || chance(rng_, opt_.faults.drop)) {
    trace(fmt::format("lost -> {}", peer));
    return;
  }
  int copies = chance(rng_, opt_.faults.dup) ? 2 : 1;
  for (int c = 0; c < copies; ++c) {
    auto t = delay(n.fifo_in);
    at(t, [this, i, peer, bytes] {
      auto& n = nodes_[i];
      if (n.peer() != peer || n.partitioned || !n.model->up())
        return;
      mix(bytes);
      n.model->receive(bytes);
    });
  }
}

void world::from_node(std::size_t i, std::string bytes) {
  auto& n = nodes_[i];
  if (!coord_up_ || n.partitioned || chance(rng_, opt_.faults.drop))
    return;
  auto peer = n.peer();
  auto gen = gen_;
  int copies = chance(rng_, opt_.faults.dup) ? 2 : 1;
  for (int c = 0; c < copies; ++c) {
    auto t = delay(n.fifo_out);
    at(t, [this, i, peer, gen, bytes] {
      auto& n = nodes_[i];
      // A coordinator restarted meanwhile never sees it; a reconnect loses it
      // unless the old connection drains late (reorder).
      if (gen != gen_ || !coord_up_ || n.partitioned || (n.peer() != peer && !opt_.faults.reorder))
        return;
      mix(bytes);
      std::uint64_t id_seen = 0;
      auto f = bus::decode_frame(bytes, id_seen);
      if (!f)
        return;
      if (f->is_reply) {
        caf::anon_send(bridge_, node_reply{peer, f->id, coord::order_reply_of(*f)});
        return;
      }
      auto req = bus::decode_coordinator_request(*f);
      if (!req)
        return;
      if (auto* hb = std::get_if<bus::heartbeat_req>(&*req)) {
        if (hb->fault && !n.fault_seen_ms)
          n.fault_seen_ms = now();
        else if (!hb->fault)
          n.fault_seen_ms.reset();
      } else if (auto* r = std::get_if<bus::report_req>(&*req)) {
        trace(fmt::format("{} -> coord report {} {} {}", peer, r->kind, r->allocation, r->reason));
      }
      caf::anon_send(bridge_, api_request{peer, f->id, f->token, std::move(*req)});
    });
  }
}

// ---- nodes ----------------------------------------------------------------------

void world::setup_nodes() {
  for (int i = 0; i < opt_.nodes; ++i) {
    node_spec s;
    s.name = fmt::format("n{}", i);
    s.mem_total_bytes = static_cast<std::uint64_t>(uniform(rng_, 16, 128)) << 30;
    s.ram_reserve_bytes = 1ull << 30;
    s.cpus = static_cast<std::uint64_t>(uniform(rng_, 8, 64));
    static const int gpu_counts[] = {0, 0, 2, 4, 8};
    s.gpus = gpu_counts[uniform(rng_, 0, 4)];
    s.vram_bytes = static_cast<std::uint64_t>(uniform(rng_, 24, 80)) << 30;
    ram_total_ += s.mem_total_bytes - s.ram_reserve_bytes;
    lanes_total_ += static_cast<std::uint64_t>(s.gpus);
    cpus_total_ += s.cpus;
    res_.parameters += fmt::format("node {}: {} GiB, {} cpus, {} GPUs\n", s.name,
                                   s.mem_total_bytes >> 30, s.cpus, s.gpus);
    sim_node n;
    n.name = s.name;
    auto idx = nodes_.size();
    node_env env;
    env.now_ms = [this] { return now(); };
    env.send = [this, idx](const std::string& bytes) { from_node(idx, bytes); };
    env.at = [this](std::int64_t t, std::function<void()> f) { at(t, std::move(f)); };
    env.trace = [this](const std::string& l) { trace(l); };
    env.on_start = [this, idx](const std::string&, const bus::start_order& o) { on_start(idx, o); };
    env.on_end = [this](const std::string&, const std::string& alloc, const std::string& job) {
      live_by_job_[job].erase(alloc);
      live_cpus_.erase(alloc);
    };
    env.on_exit_acked = [this](const std::string& alloc) {
      if (!plan_->finished_allocs.count(alloc))
        violation(
            "ack_before_commit",
            fmt::format("the exit of allocation {} was acknowledged before it was stored", alloc));
    };
    n.model = std::make_unique<node_model>(s, std::move(env));
    nodes_.push_back(std::move(n));
  }
}

void world::on_start(std::size_t i, const bus::start_order& o) {
  auto& n = nodes_[i];
  auto& m = *n.model;
  trace(fmt::format("{} starts {} of job {}", n.name, o.allocation, o.job));
  auto& live = live_by_job_[o.job];
  live.insert(o.allocation);
  if (auto k = index_of_.find(o.job); k != index_of_.end())
    live_cpus_[o.allocation] = jobs_[static_cast<std::size_t>(k->second)].spec.cpus.value_or(0);
  if (live.size() > 1)
    violation("job_twice", fmt::format("job {} has {} live allocations", o.job, live.size()));
  auto& s = m.spec();
  if (m.reserved_ram() > s.mem_total_bytes - s.ram_reserve_bytes)
    violation("ram_over",
              fmt::format("{} holds {} MiB of RAM caps; {} MiB are allocatable", n.name,
                          m.reserved_ram() >> 20, (s.mem_total_bytes - s.ram_reserve_bytes) >> 20));
  if (m.used_lanes() > static_cast<std::size_t>(s.gpus))
    violation("lane_twice", fmt::format("{} runs {} lanes' worth of work on {} lanes", n.name,
                                        m.used_lanes(), s.gpus));
  if (!started_.count(o.job)) {
    started_.insert(o.job);
    if (auto k = index_of_.find(o.job); k != index_of_.end()) {
      auto& jp = jobs_[static_cast<std::size_t>(k->second)];
      if (auto a = acked_at_.find(o.job); a != acked_at_.end())
        res_.levels[jp.level].waits_ms.push_back(now() - a->second);
      // Backfill: an earlier job of the same or a higher level still waits.
      for (int e = 0; e < k->second; ++e) {
        auto& id = job_ids_[static_cast<std::size_t>(e)];
        if (!id.empty() && !started_.count(id) &&
            jobs_[static_cast<std::size_t>(e)].level <= jp.level &&
            !is_terminal(plan_->job_states[id])) {
          ++res_.backfilled;
          break;
        }
      }
    }
  }
}

void world::boot_node(std::size_t i) {
  auto& n = nodes_[i];
  n.reconnect();
  n.model->boot(n.token);
}

// ---- workload -------------------------------------------------------------------

void world::generate() {
  int max_gpus = 0;
  std::uint64_t max_ram = 0;
  for (auto& n : nodes_) {
    max_gpus = std::max(max_gpus, n.model->spec().gpus);
    max_ram =
        std::max(max_ram, n.model->spec().mem_total_bytes - n.model->spec().ram_reserve_bytes);
  }
  std::int64_t total_run = 0;
  for (int k = 0; k < opt_.jobs; ++k) {
    job_plan j;
    auto& s = j.spec;
    auto p = uniform(rng_, 0, 99);
    j.level = p < 15 ? 0 : p < 75 ? 1 : 2;
    s.priority = std::string(j.level == 0 ? "high" : j.level == 1 ? "medium" : "low");
    s.cwd = "/";
    auto ram = static_cast<std::uint64_t>(uniform(rng_, 256, 8192)) << 20;
    ram = std::min(ram, max_ram);
    if (chance(rng_, 0.7))
      s.ram_bytes = ram;
    auto eff = s.ram_bytes.value_or(1ull << 30);
    j.w.rss_bytes = eff / 100 * static_cast<std::uint64_t>(uniform(rng_, 30, 90));
    if (max_gpus && chance(rng_, 0.3))
      s.gpus =
          static_cast<std::uint64_t>(std::min<std::int64_t>(max_gpus, chance(rng_, 0.8) ? 1 : 2));
    // Mostly short jobs, a few long ones.
    j.w.run_ms = chance(rng_, 0.9) ? uniform(rng_, 500, 60'000) : uniform(rng_, 60'000, 600'000);
    total_run += j.w.run_ms;
    j.w.exit_code = chance(rng_, 0.9) ? 0 : 1;
    if (chance(rng_, 0.6))
      s.cpus = static_cast<std::uint64_t>(uniform(rng_, 1, 8)); // every node has at least 8
    if (opt_.faults.ignore_term && chance(rng_, 0.05))
      j.w.ignores_term = true;
    if (opt_.faults.child_crashes && chance(rng_, 0.03))
      j.w.crash_signal = 11;
    if (chance(rng_, 0.1)) {
      s.preempt = std::string("checkpoint");
      j.w.checkpoints = true;
    }
    if (k > 0 && chance(rng_, 0.1))
      j.after = static_cast<int>(uniform(rng_, 0, k - 1));
    if (chance(rng_, 0.05)) {
      // A pin to a node that can run it.
      std::vector<std::size_t> fit;
      for (std::size_t i = 0; i < nodes_.size(); ++i) {
        auto& ns = nodes_[i].model->spec();
        if (static_cast<std::uint64_t>(ns.gpus) >= s.gpus.value_or(0) &&
            ns.mem_total_bytes - ns.ram_reserve_bytes >= eff)
          fit.push_back(i);
      }
      if (!fit.empty())
        s.node = nodes_[fit[static_cast<std::size_t>(
                            uniform(rng_, 0, static_cast<std::int64_t>(fit.size()) - 1))]]
                     .name;
    }
    if (chance(rng_, 0.05))
      s.timeout_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(1, j.w.run_ms / 2));
    j.w.run_ms = std::max<std::int64_t>(1, j.w.run_ms);
    s.argv = workload_argv(j.w, static_cast<std::uint64_t>(k));
    jobs_.push_back(std::move(j));
  }
  // Submissions spread so that the cluster is about fully loaded.
  auto span = std::max<std::int64_t>(60'000, total_run / std::max(1, opt_.nodes * 10));
  for (auto& j : jobs_) {
    j.at_ms = 1000 + uniform(rng_, 0, span);
    if (chance(rng_, 0.05))
      j.cancel_at_ms = j.at_ms + uniform(rng_, 0, 120'000);
  }
  // Submission order is time order; a dependency points to an earlier submit.
  std::stable_sort(jobs_.begin(), jobs_.end(), [](auto& a, auto& b) { return a.at_ms < b.at_ms; });
  fault_end_ms_ = span + 2000;
}

void world::load_workload() {
  std::ifstream in(opt_.workload_file);
  if (!in)
    throw std::runtime_error("cannot read " + opt_.workload_file);
  std::string line;
  int k = 0;
  std::int64_t last = 0;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty())
      continue;
    auto v = nlohmann::json::parse(line, nullptr, false);
    if (v.is_discarded() || !v.is_object())
      throw std::runtime_error(
          fmt::format("{} line {}: not a JSON object", opt_.workload_file, number));
    job_plan j;
    try {
      j.at_ms = v.value("at_ms", last);
      last = j.at_ms;
      auto pr = v.value("priority", std::string("medium"));
      j.level = pr == "high" ? 0 : pr == "low" ? 2 : 1;
      j.spec.priority = pr;
      j.spec.cwd = "/";
      if (v.contains("ram_bytes"))
        j.spec.ram_bytes = v["ram_bytes"].get<std::uint64_t>();
      if (v.contains("gpus"))
        j.spec.gpus = v["gpus"].get<std::uint64_t>();
      if (v.contains("node"))
        j.spec.node = v["node"].get<std::string>();
      if (v.value("checkpoint", false)) {
        j.spec.preempt = std::string("checkpoint");
        j.w.checkpoints = true;
      }
      j.w.run_ms = v.value("run_ms", 1000);
      j.w.exit_code = v.value("exit", 0);
      j.w.rss_bytes = v.value("peak_ram_bytes", std::uint64_t(0));
      j.after = v.value("after", -1);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(fmt::format("{} line {}: {}", opt_.workload_file, number, e.what()));
    }
    if (j.after >= static_cast<int>(jobs_.size()))
      throw std::runtime_error(fmt::format("{} line {}: after: must name an earlier line (0-based)",
                                           opt_.workload_file, number));
    j.spec.argv = workload_argv(j.w, static_cast<std::uint64_t>(k++));
    jobs_.push_back(std::move(j));
  }
  opt_.jobs = static_cast<int>(jobs_.size());
  fault_end_ms_ = last + 2000;
}

void world::submit(std::size_t k, int tries) {
  auto& j = jobs_[k];
  auto spec = j.spec;
  if (j.after >= 0) {
    auto& dep = job_ids_[static_cast<std::size_t>(j.after)];
    if (!dep.empty())
      spec.after = bus::string_list{dep};
  }
  if (tries == 0)
    ++pending_submits_;
  call(bus::submit_req{spec}, [this, k, tries](std::optional<api_reply> r) {
    if (!r) {
      // The reply was lost with a crash: the job may or may not exist (without
      // idempotent submits the client cannot know, so it does not retry).
      ++res_.jobs_unknown;
      --pending_submits_;
      trace(fmt::format("client: submit w{} unknown", k));
      return;
    }
    if (auto* e = std::get_if<bus::error_info>(&r->body)) {
      if (tries < 30) {
        at(now() + 1000, [this, k, tries] { submit(k, tries + 1); });
        return;
      }
      --pending_submits_;
      trace(fmt::format("client: submit w{} refused: {}", k, e->message));
      return;
    }
    --pending_submits_;
    auto& id = std::get<bus::submit_rep>(r->body).job.id;
    // Checker ack_before_commit.
    if (!plan_->committed_jobs.count(id))
      violation("ack_before_commit",
                fmt::format("submit of job {} acknowledged before it was stored", id));
    job_ids_[k] = id;
    index_of_[id] = static_cast<int>(k);
    acked_at_[id] = now();
    ++res_.jobs_acked;
    trace(fmt::format("client: w{} is job {}", k, id));
    if (auto c = jobs_[k].cancel_at_ms)
      at(std::max(*c, now()), [this, k] { cancel(k, 0); });
  });
}

void world::cancel(std::size_t k, int tries) {
  auto id = job_ids_[k];
  call(bus::cancel_req{id}, [this, k, tries](std::optional<api_reply> r) {
    bool again = !r || (std::holds_alternative<bus::error_info>(r->body) &&
                        std::get<bus::error_info>(r->body).code == errc::internal);
    if (again && tries < 30)
      at(now() + 1000, [this, k, tries] { cancel(k, tries + 1); });
  });
}

// ---- faults ---------------------------------------------------------------------

void world::schedule_faults() {
  auto& f = opt_.faults;
  auto every = [&](bool on, std::int64_t lo, std::int64_t hi, std::function<void()> act) {
    if (!on)
      return;
    for (auto t = uniform(rng_, lo, hi); t < fault_end_ms_; t += uniform(rng_, lo, hi))
      at(t, act);
  };
  auto pick = [this] {
    return static_cast<std::size_t>(uniform(rng_, 0, static_cast<std::int64_t>(nodes_.size()) - 1));
  };
  every(f.partitions, 20'000, 120'000, [this, pick] {
    auto i = pick();
    auto d = uniform(rng_, 1000, 25'000);
    nodes_[i].partitioned = true;
    ++res_.faults["partition"];
    trace(fmt::format("{} partitioned for {} ms", nodes_[i].name, d));
    at(now() + d, [this, i] {
      nodes_[i].partitioned = false;
      trace(fmt::format("{} reachable", nodes_[i].name));
    });
  });
  every(f.reconnects, 20'000, 100'000, [this, pick] {
    auto i = pick();
    nodes_[i].reconnect();
    ++res_.faults["reconnect"];
    trace(fmt::format("{} reconnects as {}", nodes_[i].name, nodes_[i].peer()));
  });
  every(f.node_crashes, 30'000, 200'000, [this, pick] {
    auto i = pick();
    if (!nodes_[i].model->up())
      return;
    ++res_.faults["node_crash"];
    nodes_[i].model->crash();
    at(now() + uniform(rng_, 1000, 30'000), [this, i] {
      if (!nodes_[i].model->up())
        boot_node(i);
    });
  });
  every(f.coordinator_crashes, 60'000, 400'000, [this] {
    crash_coordinator("injected");
    at(now() + uniform(rng_, 500, 10'000), [this] {
      if (!coord_up_)
        start_coordinator();
    });
  });
  every(f.gpu_faults, 60'000, 300'000, [this] {
    std::vector<std::size_t> gpu;
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].model->spec().gpus)
        gpu.push_back(i);
    if (gpu.empty())
      return;
    auto i =
        gpu[static_cast<std::size_t>(uniform(rng_, 0, static_cast<std::int64_t>(gpu.size()) - 1))];
    ++res_.faults["gpu_fault"];
    nodes_[i].model->inject_fault(uniform(rng_, 0, 1) ? 79 : 48);
    // An operator clears it after a while.
    auto name = nodes_[i].name;
    at(now() + uniform(rng_, 10'000, 120'000), [this, name] {
      call(bus::node_clear_fault_req{name, "checked by the operator"}, [](auto) {});
    });
  });
}

void world::heal() {
  trace("faults end; liveness phase");
  liveness_ = true;
  opt_.faults.drop = opt_.faults.dup = 0;
  opt_.faults.reorder = false;
  plan_->fail = nullptr;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].partitioned = false;
    if (!nodes_[i].model->up())
      boot_node(i);
  }
  if (!coord_up_)
    start_coordinator();
  // Latched faults are cleared by the operator, again until none is left.
  for (int s = 0; s <= 10; ++s)
    at(now() + s * 5000, [this] {
      for (auto& n : nodes_)
        if (n.model->faulted())
          call(bus::node_clear_fault_req{n.name, "liveness phase"}, [](auto) {});
    });
}

bool world::done() const {
  return liveness_ && pending_submits_ == 0 && plan_->open_jobs == 0;
}

void world::sample() {
  auto t = now();
  if (t - last_sample_ms_ < 1000)
    return;
  auto dt = static_cast<double>(t - last_sample_ms_);
  last_sample_ms_ = t;
  std::uint64_t ram = 0, lanes = 0;
  for (auto& n : nodes_) {
    ram += n.model->reserved_ram();
    lanes += n.model->used_lanes();
  }
  std::uint64_t cpus = 0;
  for (auto& [_, c] : live_cpus_)
    cpus += c;
  auto frac = [](std::uint64_t used, std::uint64_t total) {
    return total ? static_cast<double>(used) / static_cast<double>(total) : 0.0;
  };
  ram_area_ += dt * frac(ram, ram_total_);
  gpu_area_ += dt * frac(lanes, lanes_total_);
  cpu_area_ += dt * frac(cpus, cpus_total_);
  bucket_.ram += dt * frac(ram, ram_total_);
  bucket_.cpu += dt * frac(cpus, cpus_total_);
  bucket_.gpu += dt * frac(lanes, lanes_total_);
  if (t - bucket_.t_ms >= 60'000) {
    auto span = static_cast<double>(t - bucket_.t_ms);
    res_.series.push_back(
        {bucket_.t_ms, bucket_.ram / span, bucket_.cpu / span, bucket_.gpu / span});
    bucket_ = {t, 0, 0, 0};
  }
}

result world::run() {
  res_.parameters += fmt::format(
      "seed {} nodes {} jobs {} faults [{}]{}\n", opt_.seed, opt_.nodes, opt_.jobs,
      opt_.faults.describe(),
      opt_.defects.empty() ? "" : " defects " + fmt::format("{}", fmt::join(opt_.defects, ",")));
  auto& f = opt_.faults;
  auto commit_fail = f.commit_fail;
  setup_nodes();
  if (opt_.workload_file.empty())
    generate();
  else
    load_workload();
  res_.jobs_generated = static_cast<int>(jobs_.size());
  job_ids_.assign(jobs_.size(), "");
  res_.parameters += fmt::format("submissions over {} s, faults until {} s\n",
                                 fault_end_ms_ / 1000 - 2, fault_end_ms_ / 1000);
  start_coordinator();
  // Nodes join: invite, join, approve (before any fault).
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    auto name = nodes_[i].name;
    call(bus::node_invite_req{name}, [this, i, name](std::optional<api_reply> r) {
      auto code = std::get<bus::node_invite_rep>(r.value().body).code;
      call(bus::node_join_req{name, code}, [this, i, name](std::optional<api_reply> r) {
        nodes_[i].token = std::get<bus::node_join_rep>(r.value().body).token;
        call(bus::node_approve_req{name}, [this, i](std::optional<api_reply>) { boot_node(i); });
      });
    });
  }
  sched_->run();
  plan_->fail = [this, commit_fail](const change_batch&) {
    if (!chance(rng_, commit_fail))
      return false;
    ++res_.faults["commit_failure"];
    trace("store: commit fails");
    return true;
  };
  for (std::size_t k = 0; k < jobs_.size(); ++k)
    at(jobs_[k].at_ms, [this, k] { submit(k, 0); });
  schedule_faults();
  at(fault_end_ms_, [this] { heal(); });
  // Liveness bound: the longest job twice over plus the queue's work spread
  // over the nodes, and ten minutes of slack.
  std::int64_t work = 0, longest = 0;
  for (auto& j : jobs_)
    work += j.w.run_ms, longest = std::max(longest, j.w.run_ms);
  deadline_ms_ = fault_end_ms_ + 2 * longest + work / std::max(1, opt_.nodes) + 600'000;
  while (!stopped_) {
    if (sched_->has_job()) {
      auto n = sched_->jobs.size();
      if (n > 1) {
        auto i = static_cast<std::size_t>(rng_() % n);
        std::swap(sched_->jobs[0], sched_->jobs[i]);
      }
      sched_->run_once();
      ++res_.steps;
      continue;
    }
    if (done())
      break;
    auto& sch = sched_->clock().schedule();
    auto t_sim = events_.empty() ? INT64_MAX : events_.begin()->first;
    std::int64_t t_caf = INT64_MAX;
    if (!sch.empty())
      t_caf =
          std::chrono::duration_cast<std::chrono::milliseconds>(sch.begin()->first - t0_).count();
    auto t = std::min(t_sim, t_caf);
    if (t == INT64_MAX)
      break;
    if (t > deadline_ms_) {
      std::string open;
      int shown = 0;
      for (auto& [id, st] : plan_->job_states)
        if (!is_terminal(st) && shown++ < 5)
          open += fmt::format(" {}({})", id, st);
      violation("liveness",
                fmt::format("{} accepted jobs not terminal {} s after the faults "
                            "ended:{}",
                            plan_->open_jobs, (deadline_ms_ - fault_end_ms_) / 1000, open));
      break;
    }
    if (t_caf <= t_sim) {
      sched_->trigger_timeout();
    } else {
      auto target = t0_ + std::chrono::milliseconds(t);
      if (sched_->clock().current_time < target)
        sched_->clock().current_time = target;
      auto ev = std::move(events_.begin()->second);
      events_.erase(events_.begin());
      ev();
    }
    sample();
  }
  res_.sim_ms = now();
  for (auto& [id, st] : plan_->job_states)
    ++res_.outcomes[std::string(to_string(st))];
  if (res_.sim_ms > 0) {
    res_.ram_util = ram_area_ / static_cast<double>(res_.sim_ms);
    res_.gpu_util = gpu_area_ / static_cast<double>(res_.sim_ms);
    res_.cpu_util = cpu_area_ / static_cast<double>(res_.sim_ms);
  }
  res_.trace_hash = hash_;
  return res_;
}

} // namespace

result run(const options& opt) {
  spdlog::set_level(spdlog::level::off);
  try {
    world w(opt);
    return w.run();
  } catch (const std::exception& e) {
    // Bad input (a workload file, a defect name): not a finding of the run.
    result r;
    r.ok = false;
    r.violation = "input";
    r.message = e.what();
    return r;
  }
}

} // namespace cq::sim
