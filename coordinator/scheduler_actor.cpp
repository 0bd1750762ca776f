// The scheduler: the startable queue in serving order and what every node and
// live allocation holds, as views; it runs placement passes (pure policy,
// coordinator/policy/placement.hpp) on events, coalesced, and hands each
// start to its job actor.
//
// Invariants:
//  1. A job holds at most one allocation: placing a job that holds one stops
//     the coordinator (assertions stay on, ADR 0001).
//  2. At most one pass_atom is in the mailbox; every change that can let a job
//     start (enqueue, a node's news, a released allocation) triggers one.
//  3. Leases (SPEC section 4): a running allocation is at a lease boundary
//     within lease_window_ms after started + k * lease (k >= 1), once per
//     boundary; a timer (lease_atom) runs a pass at the next boundary of an
//     allocation that a queued job outranks (no other can be preempted).
//     Only then may the pass's preemption ask it to yield, and each
//     allocation is asked at most once.
//  4. Blocked notices (SPEC section 8): the head of the queue (the first
//     startable job in serving order that did not start) opens an episode;
//     once the episode has lasted blocked_after_yield_ms (a yield was asked
//     for it) or blocked_after_other_ms, its job actor records one
//     job_blocked event naming the blockers. A new head opens a new episode.
//  5. Fencing (docs/adr/0021): a lost allocation becomes a ghost: it keeps
//     its RAM, CPUs and lanes on its node (as a stopping allocation) until a
//     status of that node newer than the loss does not list it.
//  6. view.nodes[i] is node_view_of() the i-th node of `nodes`, its grant
//     included: a pass copies no node's view (only statuses and grants
//     change them, and they arrive as messages).
#include "cq/gap_vector.hpp"
#include "internal.hpp"
#include "policy/placement.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace cq::coord {

using namespace cq::actors;

namespace {

using queue_key = std::tuple<std::uint8_t, std::int64_t, std::uint64_t>; ///< level, rank, seq

/// A queued job as the scheduler keeps it: the view a pass reads where it
/// is (its id is the job's, its priority the level), and what the scheduler
/// needs besides.
struct queued_job : policy::job_view {
  queue_key key; ///< its place in the serving order (its rank and seq in it)
  bool checkpoint = false;
  job_actor handle; ///< null for a queued job that has no actor yet
  std::uint8_t level() const { return static_cast<std::uint8_t>(priority); }
};

struct scheduler_state {
  context_ptr ctx;
  std::map<queue_key, queued_job> queue;             ///< startable queued jobs, serving order
  std::unordered_map<std::string, queue_key> key_of; ///< job id -> its key in `queue`
  std::map<std::string, node_status> nodes;          ///< every known node
  /// `nodes` by name in a hash: a pass's view finds each allocation's node
  /// here (`nodes` never erases, so a map node's address stays valid).
  std::unordered_map<std::string, const node_status*> node_named;
  /// Invariant 6: the pass's view, its nodes kept up to date as statuses and
  /// grants arrive (in `nodes` order); its allocations are rebuilt per pass.
  policy::cluster_view view;
  /// `queue`'s jobs in its order, kept beside it as it changes: what a pass
  /// reads. Rebuilt per pass, copies of 100,000 views took 4 ms and 26 MB,
  /// and a walk of the map alone 6 ms (its nodes are far apart). A start
  /// near the front moves the few pointers before it, not all after it.
  gap_vector<const policy::job_view*> order;
  std::map<std::string, std::string> grants; ///< disabled node -> the one job its grant lets start
  std::unordered_map<std::string, alloc_entry> allocs; ///< live allocations by job id
  std::optional<policy::reservation> reserved;         ///< from the last pass
  std::optional<policy::preemption> preempt;           ///< from the last pass
  bool pass_pending = false;                           ///< a pass_atom is in our own mailbox
  /// Invariant 3: per job, the latest lease boundary a pass has considered.
  std::unordered_map<std::string, std::int64_t> considered;
  std::unordered_map<std::string, std::string> asked; ///< victim job -> the job it yields for
  std::optional<std::int64_t> timer_at;               ///< when the next lease_atom is due
  /// Invariant 5: lost allocations by id, with the node's heartbeat count
  /// when they were lost.
  std::unordered_map<std::string, std::pair<alloc_entry, std::uint64_t>> ghosts;
  /// Whether `allocs` or `ghosts` changed since the pass's view last copied
  /// them: until then a pass refreshes only what time and heartbeats move.
  bool allocs_changed = true;
  /// Per allocation view, its node's status (null: not known when looked
  /// up). `nodes` never erases, so a map node's address stays valid.
  std::vector<const node_status*> view_nodes;
  /// Invariant 4: the current blocking episode.
  std::string blocked_job;
  std::int64_t blocked_since_ms = 0;
  bool blocked_told = false;
  static inline const char* name = "cq.scheduler";
};

using sched_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

void trigger(sched_ptr self) {
  if (self->state.pass_pending || self->state.queue.empty())
    return;
  self->state.pass_pending = true;
  self->send(self, pass_atom::value);
}

const queue_key& key_of_view(const policy::job_view* v) {
  return static_cast<const queued_job*>(v)->key;
}

/// Where the job at `at` is in `order` (a broken invariant stops the
/// coordinator: a pass would start jobs out of order).
auto order_position(scheduler_state& st, std::map<queue_key, queued_job>::iterator at) {
  auto pos = std::lower_bound(
      st.order.begin(), st.order.end(), at->first,
      [](const policy::job_view* v, const queue_key& k) { return key_of_view(v) < k; });
  if (pos == st.order.end() || *pos != &at->second) {
    spdlog::critical("job {} is queued but not in the serving order", at->second.id);
    std::abort();
  }
  return pos;
}

/// Takes the job at `at` out of the queue (and of `order`).
void dequeue(scheduler_state& st, std::map<queue_key, queued_job>::iterator at) {
  if (at == st.queue.end())
    return;
  st.order.erase(order_position(st, at));
  st.queue.erase(at);
}

/// Replaces queued job `at` by `q` at its new key `q.key` when that key
/// keeps its place among its neighbours, as every job's does when a move
/// renumbers its level: the map node is re-linked under the new key at the
/// same address, so `order` keeps its pointer. Returns false (and changes
/// nothing) when the job changes place. (Taken out and put back, each job of
/// a renumbered level of 100,000 moved half the order twice.)
bool rekey_in_place(scheduler_state& st, std::map<queue_key, queued_job>::iterator at,
                    queued_job& q) {
  auto pos = order_position(st, at);
  if (pos != st.order.begin() && !(key_of_view(*std::prev(pos)) < q.key))
    return false;
  if (std::next(pos) != st.order.end() && !(q.key < key_of_view(*std::next(pos))))
    return false;
  auto hint = std::next(at);
  auto node = st.queue.extract(at);
  node.key() = q.key;
  node.mapped() = std::move(q);
  st.queue.insert(hint, std::move(node));
  return true;
}

/// Puts `e` in the queue at its key, replacing the job's older entry.
void enqueue(scheduler_state& st, queue_entry e) {
  // Deliberate defect (cq-sim's serving_order): levels ignored.
  queue_key k{st.ctx->cfg.defects.ignore_levels ? decltype(e.level){} : e.level, e.rank, e.seq};
  queued_job q;
  static_cast<job_resources&>(q) = std::move(e);
  q.id = std::move(e.job);
  q.priority = static_cast<policy::level>(e.level);
  q.checkpoint = e.checkpoint;
  q.handle = std::move(e.handle);
  q.key = k;
  if (auto i = st.key_of.find(q.id); i != st.key_of.end()) {
    auto old = st.queue.find(i->second);
    if (old != st.queue.end() && rekey_in_place(st, old, q)) {
      i->second = k;
      return;
    }
    dequeue(st, old);
    i->second = k;
  } else {
    st.key_of.emplace(q.id, k);
  }
  st.order.make_room(); // nothing to undo past this
  // A hint at the end: a recovery's batch comes in serving order, each entry
  // after the last (any other place is found as without a hint). In `order`
  // too: most jobs go last; any other is found by a binary search.
  auto& at = st.queue.insert_or_assign(st.queue.end(), k, std::move(q))->second;
  if (st.order.empty() || key_of_view(st.order.back()) < k)
    st.order.push_back(&at);
  else
    st.order.insert(std::upper_bound(st.order.begin(), st.order.end(), k,
                                     [](const queue_key& key, const policy::job_view* v) {
                                       return key < key_of_view(v);
                                     }),
                    &at);
}

/// A copy of a queued job's view (one that outlives its place in the queue).
policy::job_view to_view(const queued_job& q) {
  return static_cast<const policy::job_view&>(q);
}

/// The element `n` of `out` to overwrite (appended when `out` is that short):
/// rebuilding a vector in place keeps its elements' buffers.
template <class T>
T& slot(std::vector<T>& out, std::size_t n) {
  if (n == out.size())
    out.emplace_back();
  return out[n];
}

/// The latest lease boundary of `a` at `now` (0 before the first one).
std::int64_t last_boundary(const alloc_entry& a, std::int64_t now) {
  if (a.started_ms == 0 || a.lease_ms <= 0 || now < a.started_ms + a.lease_ms)
    return 0;
  return a.started_ms + (now - a.started_ms) / a.lease_ms * a.lease_ms;
}

/// Invariant 3: at a boundary no pass has considered yet, within the window.
bool at_boundary(const scheduler_state& st, const alloc_entry& a, std::int64_t now) {
  auto b = last_boundary(a, now);
  if (b == 0 || now - b > st.ctx->cfg.lease_window_ms)
    return false;
  auto c = st.considered.find(a.job);
  return c == st.considered.end() || c->second < b;
}

/// What a pass sees of node `n` (invariant 6).
policy::node_view node_view_of(const scheduler_state& st, const node_status& n) {
  auto v = policy::capacity_of(n.info);
  v.name = n.name;
  v.approved = n.approved;
  if (auto g = st.grants.find(n.name); g != st.grants.end())
    v.grant_job = g->second;
  v.last_heartbeat_ms = n.last_heartbeat_ms;
  v.gpu_fault = n.info.fault.has_value() || n.gpu_blocked;
  if (st.ctx->cfg.defects.ignore_fault_latch)
    v.gpu_fault = false;
  v.gpu_probe_busy = !n.info.busy_probes.empty();
  v.down = n.down;
  v.fenced = n.fenced;
  return v;
}

/// Whether node view `next` differs from `kept` in more than what a node's
/// telemetry moves at every heartbeat: its time, the memory available and
/// each lane's VRAM used outside cq (more_room weighs those).
bool differs_beyond_figures(const policy::node_view& kept, policy::node_view next) {
  next.last_heartbeat_ms = kept.last_heartbeat_ms;
  next.mem_available_bytes = kept.mem_available_bytes;
  if (next.lanes.size() == kept.lanes.size())
    for (std::size_t i = 0; i < next.lanes.size(); ++i)
      next.lanes[i].vram_outside_bytes = kept.lanes[i].vram_outside_bytes;
  return !(kept == next);
}

/// Invariant 6 after node `name` changed: its view replaced in place, or
/// every view rebuilt when the node is new (positions follow `nodes`).
/// Returns whether the view changed in more than its figures
/// (differs_beyond_figures).
bool refresh_node_view(scheduler_state& st, const std::string& name) {
  auto it = st.nodes.find(name);
  if (it == st.nodes.end())
    return false;
  auto& views = st.view.nodes;
  if (views.size() == st.nodes.size()) {
    auto at = it->second.view_at;
    if (at < views.size() && views[at].name == name) {
      auto next = node_view_of(st, it->second);
      bool changed = differs_beyond_figures(views[at], next);
      views[at] = std::move(next);
      return changed;
    }
  }
  views.clear();
  for (auto& [n, status] : st.nodes) {
    status.view_at = views.size();
    views.push_back(node_view_of(st, status));
  }
  return true;
}

/// The pass's view: the nodes as kept (invariant 6), the live allocations
/// and ghosts as of `now`. Each allocation's own fields (its job, node,
/// resources and lanes) are copied only when `allocs` or `ghosts` changed
/// since the last view: iterating the same maps unchanged visits them in the
/// same order. What the nodes' heartbeats, the asks and the time move is
/// refreshed every time.
const policy::cluster_view& cluster_of(scheduler_state& st, std::int64_t now) {
  auto& c = st.view;
  c.heartbeat_fresh_ms = st.ctx->cfg.heartbeat_fresh_ms;
  bool copy = std::exchange(st.allocs_changed, false) ||
              c.allocations.size() != st.allocs.size() + st.ghosts.size();
  auto& defects = st.ctx->cfg.defects;
  // Every field of each view is assigned: the views are overwritten in place.
  std::size_t n = 0;
  for (auto& [job, a] : st.allocs) {
    auto& v = slot(c.allocations, n++);
    if (copy) {
      static_cast<job_resources&>(v) = a.resources;
      v.ram_floor_bytes = a.floor_bytes;
      v.job = job;
      v.node = a.node;
      v.priority = static_cast<policy::level>(a.level);
      v.checkpoint = a.checkpoint;
      v.stopping = a.stopping;
      v.lanes = a.lanes;
      v.est_end_ms = a.est_end_ms;
      if (defects.forget_lanes)
        v.lanes.clear();
      if (defects.forget_ram)
        v.ram_bytes = v.ram_floor_bytes = 0;
    }
    auto& node = slot(st.view_nodes, n - 1);
    if (copy || !node) {
      auto i = st.node_named.find(a.node);
      node = i == st.node_named.end() ? nullptr : i->second;
    }
    // Pending growth = cap - what the allocation uses now (0 use when unknown:
    // then it may still grow to its whole cap).
    v.ram_used_bytes = 0;
    v.node_at = static_cast<std::size_t>(-1);
    if (node) {
      v.node_at = node->view_at;
      for (auto& u : node->usage)
        if (u.allocation == a.allocation)
          v.ram_used_bytes = std::min(u.ram_bytes, v.ram_bytes);
    }
    // The time test first: most allocations are not at a boundary, and the
    // ask's lookup hashes a 36-character id.
    v.at_lease_boundary = at_boundary(st, a, now) && !st.asked.count(job);
  }
  for (auto& [id, g] : st.ghosts) {
    auto& a = g.first;
    auto& v = slot(c.allocations, n++);
    if (copy) {
      static_cast<job_resources&>(v) = a.resources;
      v.ram_floor_bytes = a.floor_bytes;
      v.job = a.job;
      v.node = a.node;
      v.priority = static_cast<policy::level>(a.level);
      v.checkpoint = false;
      v.stopping = true; // its stop is in flight: it ends, and nothing preempts beside it
      v.lanes = a.lanes;
      v.est_end_ms = a.est_end_ms;
    }
    v.ram_used_bytes = 0;
    v.node_at = static_cast<std::size_t>(-1);
    v.at_lease_boundary = false;
  }
  c.allocations.resize(n);
  return c;
}

/// The job that the scheduler asked to yield for `job` ("" = none).
std::string yield_asked_for(const scheduler_state& st, const std::string& job) {
  for (auto& [victim, for_job] : st.asked)
    if (for_job == job)
      return victim;
  return {};
}

/// Invariant 4: how long the head of the queue waits before its notice.
std::int64_t blocked_delay(const scheduler_state& st) {
  return yield_asked_for(st, st.blocked_job).empty() ? st.ctx->cfg.blocked_after_other_ms
                                                     : st.ctx->cfg.blocked_after_yield_ms;
}

/// The queued job that holds the last pass's reservation, if it is still queued.
std::optional<policy::job_view> reservation_holder(const scheduler_state& st) {
  if (st.reserved)
    if (auto h = st.key_of.find(st.reserved->job); h != st.key_of.end())
      return to_view(st.queue.at(h->second));
  return std::nullopt;
}

/// The best level queued (none when empty): the serving order's first, unless
/// the levels are ignored in it (a deliberate defect of cq-sim's).
std::optional<std::uint8_t> best_queued_level(const scheduler_state& st) {
  if (st.queue.empty())
    return std::nullopt;
  std::uint8_t best = st.queue.begin()->second.level();
  if (st.ctx->cfg.defects.ignore_levels)
    for (auto& [k, e] : st.queue)
      best = std::min(best, e.level());
  return best;
}

/// Invariants 3 and 4: the next lease boundary of any allocation, or the
/// moment the current episode's notice is due, whichever comes first.
void arm_timer(sched_ptr self, std::int64_t now) {
  auto& st = self->state;
  std::optional<std::int64_t> due;
  auto earlier = [&](std::int64_t t) {
    if (!due || t < *due)
      due = t;
  };
  // Only boundaries a queued job outranks (docs/adr/0065): a better job's
  // enqueue runs a pass, which arms the timer again.
  if (auto best = best_queued_level(st))
    for (auto& [job, a] : st.allocs)
      if (*best < a.level && a.started_ms && a.lease_ms > 0 && a.checkpoint &&
          !st.asked.count(job)) {
        auto b = last_boundary(a, now);
        earlier(b == 0 ? a.started_ms + a.lease_ms : b + a.lease_ms);
      }
  if (!st.blocked_job.empty() && !st.blocked_told)
    earlier(st.blocked_since_ms + blocked_delay(st));
  if (!due || (st.timer_at && *st.timer_at <= *due && *st.timer_at > now))
    return;
  st.timer_at = due;
  self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(*due - now, 1)),
                     lease_atom::value);
}

/// Whether status `next` of a known node can change what a pass decides
/// beyond its view (refresh_node_view says that): the allocations it lists
/// use of, or a heartbeat that makes a node fresh again. (A heartbeat that
/// only keeps a fresh node fresh cannot: every pass since the last one saw
/// it fresh.) A new node always can. What the figures of its use do,
/// more_room says.
bool changes_placement(const scheduler_state& st, const node_status& kept, const node_status& next,
                       std::int64_t now) {
  if (kept.name.empty() || kept.usage.size() != next.usage.size())
    return true;
  for (std::size_t i = 0; i < kept.usage.size(); ++i)
    if (kept.usage[i].allocation != next.usage[i].allocation)
      return true;
  return !policy::heartbeat_fresh(kept.last_heartbeat_ms, st.ctx->cfg.heartbeat_fresh_ms, now);
}

/// Whether status `next` of a known node leaves more room for a start than
/// `kept`, its previous one, in the figures its telemetry moves (ADR 0063):
/// the memory place() counts as free (the available less each allocation's
/// growth to come, cap minus use), or a lane's VRAM left by processes
/// outside cq. Every status with more room runs a pass, so one with no more
/// than the status before it has no more than the last pass saw.
bool more_room(const scheduler_state& st, const node_status& kept, const node_status& next) {
  auto i64 = [](std::uint64_t v) {
    return static_cast<std::int64_t>(std::min<std::uint64_t>(v, INT64_MAX / 4));
  };
  auto delta = i64(next.info.mem_available_bytes) - i64(kept.info.mem_available_bytes);
  for (auto& [job, a] : st.allocs) {
    if (a.node != next.name)
      continue;
    auto cap = a.resources.ram_bytes;
    auto use = [&](const node_status& s) {
      for (auto& u : s.usage)
        if (u.allocation == a.allocation)
          return i64(std::min(u.ram_bytes, cap));
      return std::int64_t{0};
    };
    delta += use(next) - use(kept);
  }
  if (delta > 0)
    return true;
  auto& was = kept.info.lanes;
  auto& now = next.info.lanes;
  if (was.size() != now.size())
    return true;
  for (std::size_t i = 0; i < now.size(); ++i)
    if (now[i].vram_outside_bytes < was[i].vram_outside_bytes)
      return true;
  return false;
}

/// Invariants 3 and 4 at a timer: whether a pass must run now. A boundary
/// where no queued job has a strictly higher level than the allocation
/// cannot preempt it (SPEC section 4): its lease renews without a pass, the
/// boundary considered. (A boundary's pass is for preemption: starts follow
/// the events that free resources, each of which runs a pass.)
bool lease_pass_needed(scheduler_state& st, std::int64_t now) {
  auto best = best_queued_level(st);
  if (!best)
    return false;
  if (!st.blocked_job.empty() && !st.blocked_told && now - st.blocked_since_ms >= blocked_delay(st))
    return true;
  bool needed = false;
  for (auto& [job, a] : st.allocs) {
    if (!at_boundary(st, a, now) || st.asked.count(job))
      continue;
    if (*best < a.level)
      needed = true;
    else
      st.considered[job] = last_boundary(a, now);
  }
  return needed;
}

scheduler_actor::behavior_type scheduler_behavior(sched_ptr self, context_ptr ctx) {
  self->state.ctx = std::move(ctx);
  return {
      [=](enqueue_atom, queue_entry& e) {
        enqueue(self->state, std::move(e));
        trigger(self);
      },
      [=](enqueue_atom, std::vector<queue_entry>& entries) {
        self->state.key_of.reserve(self->state.key_of.size() + entries.size());
        for (auto& e : entries)
          enqueue(self->state, std::move(e));
        trigger(self);
      },
      [=](rekey_atom, queue_entry& e) {
        if (!self->state.key_of.count(e.job))
          return; // placed (or dequeued) since the api sent it
        enqueue(self->state, std::move(e));
        trigger(self);
      },
      [=](dequeue_atom, const std::string& job) {
        auto& st = self->state;
        if (auto i = st.key_of.find(job); i != st.key_of.end()) {
          dequeue(st, st.queue.find(i->second));
          st.key_of.erase(i);
        }
      },
      [=](grant_atom, const std::string& node, const std::string& job, bool active) {
        auto& st = self->state;
        if (active)
          st.grants[node] = job;
        else if (auto g = st.grants.find(node); g != st.grants.end() && g->second == job)
          st.grants.erase(g);
        refresh_node_view(st, node);
        trigger(self);
      },
      [=](node_atom, node_status n) {
        auto& st = self->state;
        auto before = st.ghosts.size();
        // Invariant 5: a ghost this status does not list, from a heartbeat
        // after its loss, is gone from the node.
        std::erase_if(st.ghosts, [&](auto& kv) {
          auto& [a, beats] = kv.second;
          return a.node == n.name && n.beats > beats &&
                 std::find(n.listed.begin(), n.listed.end(), kv.first) == n.listed.end();
        });
        auto name = n.name;
        auto& kept = st.nodes[name];
        st.node_named.emplace(name, &kept);
        st.allocs_changed |= before != st.ghosts.size();
        bool news = before != st.ghosts.size() ||
                    changes_placement(st, kept, n, now_ms(self, *st.ctx)) || more_room(st, kept, n);
        auto view_at = kept.view_at;
        kept = std::move(n);
        kept.view_at = view_at;
        if (refresh_node_view(st, name) || news)
          trigger(self);
      },
      [=](reserve_atom, alloc_entry a) {
        auto job = a.job;
        self->state.allocs[job] = std::move(a);
        self->state.allocs_changed = true;
        arm_timer(self, now_ms(self, *self->state.ctx));
      },
      [=](release_atom, const std::string& job) {
        auto& st = self->state;
        st.allocs_changed |= st.allocs.erase(job) != 0;
        st.considered.erase(job);
        st.asked.erase(job);
        trigger(self);
      },
      [=](lost_atom, const std::string& job) {
        auto& st = self->state;
        if (auto i = st.allocs.find(job); i != st.allocs.end()) {
          auto n = st.nodes.find(i->second.node);
          auto beats = n == st.nodes.end() ? 0 : n->second.beats;
          auto id = i->second.allocation;
          st.ghosts[id] = {std::move(i->second), beats};
          st.allocs.erase(i);
          st.allocs_changed = true;
        }
        st.considered.erase(job);
        st.asked.erase(job);
        trigger(self);
      },
      [=](largest_atom) -> std::uint64_t {
        std::uint64_t out = 0;
        for (auto& [name, n] : self->state.nodes)
          if (n.info.mem_total_bytes > n.info.ram_reserve_bytes)
            out = std::max(out, n.info.mem_total_bytes - n.info.ram_reserve_bytes);
        return out;
      },
      [=](lease_atom) {
        auto& st = self->state;
        st.timer_at.reset();
        auto now = now_ms(self, *st.ctx);
        if (lease_pass_needed(st, now))
          trigger(self);
        arm_timer(self, now);
      },
      [=](explain_atom, const bus::string_list& jobs) -> std::vector<bus::string_list> {
        auto& st = self->state;
        auto now = now_ms(self, *st.ctx);
        std::vector<bus::string_list> out(jobs.size());
        if (jobs.empty())
          return out;
        auto& cluster = cluster_of(st, now);
        auto holder = reservation_holder(st);
        for (std::size_t k = 0; k < jobs.size(); ++k)
          if (auto i = st.key_of.find(jobs[k]); i != st.key_of.end())
            out[k] = policy::explain(cluster, st.queue.at(i->second), st.reserved, holder, now);
        return out;
      },
      [=](pass_atom) {
        auto& st = self->state;
        st.pass_pending = false;
        // Nothing can start without a live node: skip the pass. (The next
        // heartbeat that makes a node live triggers one.)
        auto now_check = now_ms(self, *st.ctx);
        bool any_live = std::any_of(st.nodes.begin(), st.nodes.end(), [&](auto& kv) {
          auto& n = kv.second;
          return n.approved && policy::heartbeat_fresh(n.last_heartbeat_ms,
                                                       st.ctx->cfg.heartbeat_fresh_ms, now_check);
        });
        if (!any_live) {
          st.reserved.reset();
          st.preempt.reset();
          return;
        }
        auto& cluster = cluster_of(st, now_check);
        policy::queue_ref queue = st.order;
        auto& defects = st.ctx->cfg.defects;
        // Deliberate defect (cq-sim's serving_order): the pass leaves the low
        // level out.
        std::vector<const policy::job_view*> starved;
        if (defects.starve_low) {
          for (auto* v : st.order)
            if (v->priority != policy::level::low)
              starved.push_back(v);
          queue = starved;
        }
        auto now = now_ms(self, *st.ctx);
        // Deliberate defect (cq-sim's serving_order): the pass serves its
        // queue back to front (the checker still sees it in order).
        std::vector<const policy::job_view*> reversed;
        if (defects.serve_newest_first)
          reversed.assign(queue.rbegin(), queue.rend());
        auto plan = policy::place(cluster, defects.serve_newest_first ? reversed : queue, now);
        if (st.ctx->observe_pass)
          st.ctx->observe_pass(cluster, queue, plan);
        st.reserved = plan.reserved;
        st.preempt = plan.preempt;
        // Invariant 3: the victim (at its boundary) is asked once; every
        // boundary this pass saw is considered.
        if (plan.preempt) {
          auto& p = *plan.preempt;
          spdlog::info("job {} asks job {} on {} to yield (lease boundary)", p.for_job,
                       p.victim_job, p.node);
          st.asked[p.victim_job] = p.for_job;
          self->send(st.ctx->api, yield_atom::value, p.victim_job,
                     fmt::format("lease boundary: job {} of a higher priority needs its "
                                 "resources on {}",
                                 p.for_job, p.node));
        }
        for (auto& v : cluster.allocations)
          if (v.at_lease_boundary)
            st.considered[v.job] = last_boundary(st.allocs.at(v.job), now);
        for (auto& s : plan.starts) {
          auto at = st.queue.find(st.key_of.at(s.job));
          auto entry = std::move(at->second);
          dequeue(st, at);
          st.key_of.erase(s.job);
          // Invariant: a job holds at most one allocation.
          if (st.allocs.count(s.job)) {
            spdlog::critical("job {} placed while it holds an allocation", s.job);
            std::abort();
          }
          st.allocs_changed = true;
          st.allocs[s.job] = alloc_entry{s.job,
                                         "",
                                         s.node,
                                         entry.level(),
                                         entry.checkpoint,
                                         false,
                                         entry,
                                         s.ram_floor_bytes,
                                         s.lanes,
                                         now + entry.est_ms};
          if (entry.handle)
            self->send(entry.handle, place_atom::value, s.node, st.nodes.at(s.node).handle, s.lanes,
                       s.ram_floor_bytes);
          else // no actor yet: the api spawns it (api/parked.cpp)
            self->send(st.ctx->api, place_atom::value, s.job, s.node, st.nodes.at(s.node).handle,
                       s.lanes, s.ram_floor_bytes);
        }
        // Invariant 4: the head of the queue and its episode.
        if (st.queue.empty()) {
          st.blocked_job.clear();
        } else {
          auto& head = st.queue.begin()->second;
          if (head.id != st.blocked_job) {
            st.blocked_job = head.id;
            st.blocked_since_ms = now;
            st.blocked_told = false;
          }
          if (!st.blocked_told && now - st.blocked_since_ms >= blocked_delay(st)) {
            st.blocked_told = true;
            auto behind_yield = yield_asked_for(st, head.id);
            auto why = policy::explain(cluster, head, st.reserved, reservation_holder(st), now);
            std::string text =
                fmt::format("head of the queue for {} s", (now - st.blocked_since_ms) / 1000);
            if (!behind_yield.empty())
              text += fmt::format("; behind a requested yield of job {}", behind_yield);
            for (auto& w : why) {
              if (text.size() > 2000)
                break;
              text += "; " + w;
            }
            if (head.handle)
              caf::anon_send(head.handle, event_atom::value, std::string("blocked"), text);
            else
              self->send(st.ctx->api, event_atom::value, head.id, std::string("blocked"), text);
          }
        }
        arm_timer(self, now);
      },
  };
}

} // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, context_ptr ctx) {
  return sys.spawn(scheduler_behavior, std::move(ctx));
}

} // namespace cq::coord
