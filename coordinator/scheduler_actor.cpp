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
#include "scheduler_state.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace cq::coord {

using namespace cq::actors;

namespace {

using namespace sched;

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
          // It held the reservation (held, cancelled): jobs kept back so as
          // not to delay it may start now, and the next job may reserve. A
          // dequeue frees nothing else, so only this one plans again.
          if (st.reserved && st.reserved->job == job) {
            st.reserved.reset();
            trigger(self);
          }
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
