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

struct scheduler_state {
  context_ptr ctx;
  std::map<queue_key, queue_entry> queue;              ///< startable queued jobs, serving order
  std::unordered_map<std::string, queue_key> key_of;   ///< job id -> its key in `queue`
  std::map<std::string, node_status> nodes;            ///< every known node
  std::unordered_map<std::string, alloc_entry> allocs; ///< live allocations by job id
  std::optional<policy::reservation> reserved;         ///< from the last pass
  std::optional<policy::preemption> preempt;           ///< from the last pass
  bool pass_pending = false;                           ///< a pass_atom is in our own mailbox
  static inline const char* name = "cq.scheduler";
};

using sched_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

void trigger(sched_ptr self) {
  if (self->state.pass_pending || self->state.queue.empty())
    return;
  self->state.pass_pending = true;
  self->send(self, pass_atom::value);
}

policy::job_view to_view(const queue_entry& e) {
  policy::job_view v;
  static_cast<job_resources&>(v) = e;
  v.id = e.job;
  v.priority = static_cast<policy::level>(e.level);
  return v;
}

policy::cluster_view cluster_of(const scheduler_state& st) {
  policy::cluster_view c;
  c.heartbeat_fresh_ms = st.ctx->cfg.heartbeat_fresh_ms;
  c.nodes.reserve(st.nodes.size());
  for (auto& [name, n] : st.nodes) {
    policy::node_view v;
    v.name = name;
    v.approved = n.approved;
    v.last_heartbeat_ms = n.last_heartbeat_ms;
    v.mem_total_bytes = n.info.mem_total_bytes;
    v.mem_available_bytes = n.info.mem_available_bytes;
    v.ram_reserve_bytes = n.info.ram_reserve_bytes;
    v.ram_floor_bytes = n.info.ram_floor_bytes;
    v.cpus = n.info.cpus;
    v.vram_cap_bytes = n.info.vram_cap_bytes;
    v.gpu_fault = n.info.fault.has_value() || n.gpu_blocked;
    if (st.ctx->cfg.defects.ignore_fault_latch)
      v.gpu_fault = false;
    v.gpu_probe_busy = !n.info.busy_probes.empty();
    for (auto& l : n.info.lanes)
      v.lanes.push_back({l.name, l.vram_total_bytes, l.vram_outside_bytes, false});
    for (auto& h : n.info.holds) {
      if (h.lane.empty())
        v.held = true;
      for (auto& l : v.lanes)
        if (l.name == h.lane)
          l.held = true;
    }
    c.nodes.push_back(std::move(v));
  }
  c.allocations.reserve(st.allocs.size());
  for (auto& [job, a] : st.allocs) {
    policy::allocation_view v;
    static_cast<job_resources&>(v) = a.resources;
    v.ram_floor_bytes = a.floor_bytes;
    v.job = job;
    v.node = a.node;
    v.priority = static_cast<policy::level>(a.level);
    v.checkpoint = a.checkpoint;
    v.stopping = a.stopping;
    // Pending growth = cap - what the allocation uses now (0 use when unknown:
    // then it may still grow to its whole cap).
    v.ram_used_bytes = 0;
    if (auto n = st.nodes.find(a.node); n != st.nodes.end())
      for (auto& u : n->second.usage)
        if (u.allocation == a.allocation)
          v.ram_used_bytes = std::min(u.ram_bytes, v.ram_bytes);
    v.lanes = a.lanes;
    v.est_end_ms = a.est_end_ms;
    if (st.ctx->cfg.defects.forget_lanes)
      v.lanes.clear();
    if (st.ctx->cfg.defects.forget_ram)
      v.ram_bytes = v.ram_used_bytes = v.ram_floor_bytes = 0;
    c.allocations.push_back(std::move(v));
  }
  return c;
}

scheduler_actor::behavior_type scheduler_behavior(sched_ptr self, context_ptr ctx) {
  self->state.ctx = std::move(ctx);
  return {
      [=](enqueue_atom, queue_entry e) {
        auto& st = self->state;
        if (auto i = st.key_of.find(e.job); i != st.key_of.end())
          st.queue.erase(i->second);
        queue_key k{e.level, e.rank, e.seq};
        st.key_of[e.job] = k;
        st.queue[k] = std::move(e);
        trigger(self);
      },
      [=](dequeue_atom, const std::string& job) {
        auto& st = self->state;
        if (auto i = st.key_of.find(job); i != st.key_of.end()) {
          st.queue.erase(i->second);
          st.key_of.erase(i);
        }
      },
      [=](node_atom, node_status n) {
        self->state.nodes[n.name] = std::move(n);
        trigger(self);
      },
      [=](reserve_atom, alloc_entry a) {
        auto job = a.job;
        self->state.allocs[job] = std::move(a);
      },
      [=](release_atom, const std::string& job) {
        self->state.allocs.erase(job);
        trigger(self);
      },
      [=](explain_atom, const std::string& job) -> bus::string_list {
        auto& st = self->state;
        auto i = st.key_of.find(job);
        if (i == st.key_of.end())
          return {};
        std::optional<policy::job_view> holder;
        if (st.reserved)
          if (auto h = st.key_of.find(st.reserved->job); h != st.key_of.end())
            holder = to_view(st.queue.at(h->second));
        return policy::explain(cluster_of(st), to_view(st.queue.at(i->second)), st.reserved, holder,
                               now_ms(self, *st.ctx));
      },
      [=](pass_atom) {
        auto& st = self->state;
        st.pass_pending = false;
        // Nothing can start without a live node: skip copying the whole queue.
        // (The next heartbeat that makes a node live triggers a pass.)
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
        auto cluster = cluster_of(st);
        std::vector<policy::job_view> queue;
        queue.reserve(st.queue.size());
        for (auto& [k, e] : st.queue)
          if (!st.ctx->cfg.defects.starve_low || e.level != 2)
            queue.push_back(to_view(e));
        auto now = now_ms(self, *st.ctx);
        auto plan = policy::place(cluster, queue, now);
        st.reserved = plan.reserved;
        if (plan.preempt && (!st.preempt || st.preempt->victim_job != plan.preempt->victim_job))
          spdlog::info("job {} would ask job {} on {} to yield at its next lease boundary",
                       plan.preempt->for_job, plan.preempt->victim_job, plan.preempt->node);
        st.preempt = plan.preempt;
        for (auto& s : plan.starts) {
          auto k = st.key_of.at(s.job);
          auto entry = std::move(st.queue.at(k));
          st.queue.erase(k);
          st.key_of.erase(s.job);
          // Invariant: a job holds at most one allocation.
          if (st.allocs.count(s.job)) {
            spdlog::critical("job {} placed while it holds an allocation", s.job);
            std::abort();
          }
          st.allocs[s.job] = alloc_entry{s.job,
                                         "",
                                         s.node,
                                         entry.level,
                                         entry.checkpoint,
                                         false,
                                         entry,
                                         s.ram_floor_bytes,
                                         s.lanes,
                                         now + entry.est_ms};
          self->send(entry.handle, place_atom::value, s.node, st.nodes.at(s.node).handle, s.lanes,
                     s.ram_floor_bytes);
        }
      },
  };
}

} // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, context_ptr ctx) {
  return sys.spawn(scheduler_behavior, std::move(ctx));
}

} // namespace cq::coord
