// The store, scheduler, job, allocation and node actors.
#include "internal.hpp"
#include "policy/placement.hpp"
#include "store/store.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace cq::coord {

using namespace cq::actors;

std::int64_t now_ms(caf::local_actor* self, const context& ctx) {
  auto d = self->clock().now() - ctx.steady;
  return ctx.epoch_ms + std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

std::uint64_t effective_ram(const context& ctx, const bus::job_info& job) {
  return job.ram_bytes ? *job.ram_bytes : ctx.cfg.default_ram_bytes;
}

// ---- store ------------------------------------------------------------------

namespace {

/// Hands the current request to `dest`, whose reply goes straight to our sender.
template <class Handle, class... Ts>
caf::response_promise forward(caf::local_actor* self, const Handle& dest, Ts&&... xs) {
  auto rp = self->make_response_promise();
  rp.delegate(dest, std::forward<Ts>(xs)...);
  return rp;
}

struct store_state {
  std::shared_ptr<store> db; ///< the SQLite store; only this actor touches it
  /// Batches received since the last flush, with the promise each waits on.
  std::vector<std::pair<std::shared_ptr<const change_batch>, caf::response_promise>> pending;
  bool flush_scheduled = false; ///< a flush_atom is in our own mailbox
  static inline const char* name = "cq.store";
};

caf::behavior store_actor(caf::stateful_actor<store_state>* self, std::shared_ptr<store> db) {
  self->state.db = std::move(db);
  return {
      [=](commit_atom, std::shared_ptr<const change_batch> batch) {
        auto rp = self->make_response_promise();
        self->state.pending.emplace_back(std::move(batch), rp);
        // A message to ourselves lands behind everything already in the mailbox:
        // every commit that arrived meanwhile joins this transaction.
        if (!self->state.flush_scheduled) {
          self->state.flush_scheduled = true;
          self->send(self, flush_atom::value);
        }
        return rp;
      },
      [=](flush_atom) {
        auto& st = self->state;
        st.flush_scheduled = false;
        auto pending = std::move(st.pending);
        st.pending.clear();
        change_batch all;
        for (auto& [b, _] : pending)
          all.insert(all.end(), b->begin(), b->end());
        auto err = st.db->apply(all);
        if (!err) {
          for (auto& [_, rp] : pending)
            rp.deliver(commit_result{});
          return;
        }
        // One bad batch must not fail the others: retry each on its own.
        spdlog::warn("group commit of {} batches failed ({}); retrying one by one", pending.size(),
                     *err);
        for (auto& [b, rp] : pending) {
          auto e = st.db->apply(*b);
          rp.deliver(commit_result{e ? *e : std::string()});
        }
      },
  };
}

// ---- scheduler --------------------------------------------------------------

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

using sched_ptr = caf::stateful_actor<scheduler_state>*;

void trigger(sched_ptr self) {
  if (self->state.pass_pending || self->state.queue.empty())
    return;
  self->state.pass_pending = true;
  self->send(self, pass_atom::value);
}

policy::job_view to_view(const queue_entry& e) {
  policy::job_view v;
  v.id = e.job;
  v.priority = static_cast<policy::level>(e.level);
  v.ram_bytes = e.ram_bytes;
  v.vram_bytes = e.vram_bytes;
  v.gpus = e.gpus;
  v.cpus = e.cpus;
  v.ram_floor_bytes = e.ram_floor_bytes;
  v.ram_start_min_bytes = e.ram_start_min_bytes;
  v.est_ms = e.est_ms;
  v.pinned_node = e.pinned_node;
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
    v.gpu_fault = n.info.fault.has_value();
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
    v.job = job;
    v.node = a.node;
    v.priority = static_cast<policy::level>(a.level);
    v.checkpoint = a.checkpoint;
    v.stopping = a.stopping;
    v.ram_bytes = a.ram_bytes;
    // Pending growth = cap - what the allocation uses now (0 use when unknown:
    // then it may still grow to its whole cap).
    v.ram_used_bytes = 0;
    if (auto n = st.nodes.find(a.node); n != st.nodes.end())
      for (auto& u : n->second.usage)
        if (u.allocation == a.allocation)
          v.ram_used_bytes = std::min(u.ram_bytes, a.ram_bytes);
    v.ram_floor_bytes = a.ram_floor_bytes;
    v.cpus = a.cpus;
    v.vram_bytes = a.vram_bytes;
    v.lanes = a.lanes;
    v.est_end_ms = a.est_end_ms;
    c.allocations.push_back(std::move(v));
  }
  return c;
}

caf::behavior scheduler_actor(sched_ptr self, context_ptr ctx) {
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
                                         entry.ram_bytes,
                                         s.ram_floor_bytes,
                                         entry.cpus,
                                         entry.vram_bytes,
                                         s.lanes,
                                         now + entry.est_ms};
          self->send(entry.handle, place_atom::value, s.node, st.nodes.at(s.node).handle, s.lanes,
                     s.ram_floor_bytes);
        }
      },
  };
}

// ---- allocation -------------------------------------------------------------

struct allocation_state {
  context_ptr ctx;
  std::string id;                        ///< allocation id
  caf::actor node;                       ///< node actor the allocation lives on
  caf::actor job;                        ///< the job actor that owns it
  bool confirmed = false;                ///< the node reported the start
  std::optional<bus::start_order> order; ///< re-sent while unconfirmed when the node reconnects
  static inline const char* name = "cq.allocation";
};

/// One live allocation: carries its orders to the node actor, its reports to
/// the job actor, and times out a start the node never confirms.
caf::behavior allocation_actor(caf::stateful_actor<allocation_state>* self, context_ptr ctx,
                               std::string id, caf::actor node, caf::actor job,
                               std::optional<bus::start_order> order, bool confirmed,
                               bool stopping) {
  auto& st = self->state;
  st.ctx = ctx, st.id = id, st.node = node, st.job = job, st.confirmed = confirmed;
  self->send(node, attach_atom::value, id, caf::actor{self});
  st.order = order;
  if (order)
    self->send(node, std::move(*order));
  if (stopping)
    self->send(node, bus::stop_order{id, static_cast<std::uint64_t>(ctx->cfg.stop_grace.count())});
  if (!confirmed)
    self->delayed_send(self, ctx->cfg.start_timeout, timeout_atom::value);
  return {
      [=](report_atom, const bus::report_req& r) -> caf::result<bus::report_rep> {
        auto& st = self->state;
        if (r.kind == "started") {
          st.confirmed = true;
          return forward(self, st.job, started_atom::value, r);
        }
        auto rp = self->make_response_promise<bus::report_rep>();
        self->request(st.job, caf::infinite, exited_atom::value, r)
            .then(
                [=](bus::report_rep ack) mutable {
                  rp.deliver(ack);
                  self->send(self->state.node, detach_atom::value, self->state.id);
                  self->quit();
                },
                [=](caf::error& e) mutable { rp.deliver(e); });
        return rp;
      },
      [=](timeout_atom) {
        auto& st = self->state;
        if (st.confirmed)
          return;
        spdlog::warn("allocation {}: node never confirmed the start", st.id);
        self->send(st.job, lost_atom::value, st.id);
        // If the start arrives late, the node must not keep running given-away work.
        self->send(st.node, bus::stop_order{st.id, 0});
        self->send(st.node, detach_atom::value, st.id);
        self->quit();
      },
      [=](resend_atom) {
        // The node reconnected (a restart, a network cut): an order sent to its
        // old connection may be lost. Starts are idempotent on the node.
        auto& st = self->state;
        if (!st.confirmed && st.order)
          self->send(st.node, *st.order);
      },
      [=](stop_atom) {
        auto& st = self->state;
        self->send(st.node, bus::stop_order{
                                st.id, static_cast<std::uint64_t>(st.ctx->cfg.stop_grace.count())});
      },
  };
}

// ---- job --------------------------------------------------------------------

struct job_actor_state {
  context_ptr ctx;
  job_row row;                               ///< the committed job row
  std::optional<bus::allocation_info> alloc; ///< the live allocation's committed row
  caf::actor alloc_actor;                    ///< its actor (when `alloc` is set)
  std::set<std::string> waiting_on;          ///< dependencies that have not succeeded yet
  std::uint64_t ram_floor_bytes = 0;         ///< combined floor of the live allocation
  bool resume = false; ///< the last attempt checkpointed: the next one resumes (CQ_RESUME=1)
  static inline const char* name = "cq.job";
};

using job_ptr = caf::stateful_actor<job_actor_state>*;

/// Commits `batch`, suspending every other message of this job until it is
/// durable (so transitions are applied one at a time), then runs `on_ok`.
template <class OnOk, class OnErr>
void commit(job_ptr self, change_batch batch, OnOk on_ok, OnErr on_err) {
  self->request(self->state.ctx->store, caf::infinite, commit_atom::value,
                std::make_shared<const change_batch>(std::move(batch)))
      .await(
          [=](const commit_result& r) mutable {
            if (r.error.empty()) {
              on_ok();
            } else {
              spdlog::error("job {}: commit failed: {}", self->state.row.info.id, r.error);
              on_err(bus::error_info{errc::internal, "could not store the change: " + r.error});
            }
          },
          [=](caf::error& e) mutable {
            on_err(bus::error_info{errc::internal, "store unavailable: " + to_string(e)});
          });
}

void publish(job_ptr self) {
  auto& st = self->state;
  self->send(st.ctx->api, job_atom::value, st.row);
  if (st.alloc)
    self->send(st.ctx->api, alloc_atom::value, *st.alloc);
}

std::uint8_t level_of(const bus::job_info& j) {
  auto l = policy::parse_level(j.priority);
  return static_cast<std::uint8_t>(l ? *l : policy::level::medium);
}

/// Puts the job in the scheduler's queue if it is queued and startable.
void enqueue(job_ptr self) {
  auto& st = self->state;
  auto& j = st.row.info;
  if (j.state != std::string(job_state::queued) || !st.waiting_on.empty() || st.alloc)
    return;
  queue_entry e;
  e.job = j.id;
  e.seq = st.row.seq;
  e.level = level_of(j);
  e.rank = st.row.rank;
  e.ram_bytes = j.effective_ram_bytes ? j.effective_ram_bytes : effective_ram(*st.ctx, j);
  e.vram_bytes = j.vram_bytes.value_or(0);
  e.gpus = j.gpus;
  e.cpus = j.cpus;
  e.ram_floor_bytes = j.ram_floor_bytes;
  e.ram_start_min_bytes = j.ram_start_min_bytes;
  e.est_ms = static_cast<std::int64_t>(j.effective_est_ms ? j.effective_est_ms
                                                          : st.ctx->cfg.default_est_ms);
  e.pinned_node = j.pinned_node;
  e.checkpoint = j.preempt == "checkpoint";
  e.handle = caf::actor{self};
  self->send(st.ctx->scheduler, enqueue_atom::value, std::move(e));
}

/// Tells the scheduler what the live allocation holds.
void reserve(job_ptr self, std::int64_t est_end_ms) {
  auto& st = self->state;
  auto& j = st.row.info;
  if (!st.alloc)
    return;
  alloc_entry a{j.id,
                st.alloc->id,
                st.alloc->node,
                level_of(j),
                j.preempt == "checkpoint",
                j.state == std::string(job_state::stopping),
                j.effective_ram_bytes ? j.effective_ram_bytes : effective_ram(*st.ctx, j),
                st.ram_floor_bytes,
                j.cpus,
                j.vram_bytes.value_or(0),
                st.alloc->lanes,
                est_end_ms};
  self->send(st.ctx->scheduler, reserve_atom::value, std::move(a));
}

std::int64_t est_end(job_ptr self, std::int64_t started_ms) {
  auto& j = self->state.row.info;
  auto est = j.effective_est_ms ? static_cast<std::int64_t>(j.effective_est_ms)
                                : self->state.ctx->cfg.default_est_ms;
  return started_ms + est;
}

bus::start_order make_order(const job_row& row, const bus::allocation_info& a, std::uint64_t floor,
                            bool resume) {
  auto& j = row.info;
  bus::start_order o{a.id, j.id, a.attempt, j.argv, j.cwd, row.env, j.ram_bytes};
  o.lanes = a.lanes;
  if (floor || j.ram_start_min_bytes) {
    o.ram_floor_bytes = floor;
    o.ram_start_min_bytes = j.ram_start_min_bytes;
    // The node's admission check needs the cap it accounts for.
    o.ram_bytes =
        j.effective_ram_bytes ? std::optional<std::uint64_t>(j.effective_ram_bytes) : j.ram_bytes;
  }
  o.vram_bytes = j.vram_bytes;
  o.timeout_ms = j.timeout_ms;
  if (resume)
    o.resume = true;
  return o;
}

/// Ends the live allocation with `a`'s final fields and moves the job to `state`.
void finish(job_ptr self, bus::allocation_info a, job_row row, std::function<void()> then,
            std::function<void(bus::error_info)> on_err) {
  commit(
      self, {row, a},
      [=]() mutable {
        auto& st = self->state;
        st.row = row;
        st.alloc = a;
        publish(self);
        st.alloc.reset();
        st.alloc_actor = nullptr;
        self->send(st.ctx->scheduler, release_atom::value, row.info.id);
        then();
      },
      on_err);
}

/// Fails a job that never started because a dependency did not succeed.
void fail_dependency(job_ptr self, const std::string& dep, const std::string& dep_state) {
  auto& st = self->state;
  auto now = now_ms(self, *st.ctx);
  job_row next = st.row;
  next.info.state = job_state::failed;
  next.info.reason = "dependency_failed";
  next.info.finished_ms = now;
  spdlog::info("job {}: dependency {} is {}; failing", next.info.id, dep, dep_state);
  commit(
      self, {next},
      [=] {
        self->state.row = next;
        publish(self);
        self->send(self->state.ctx->scheduler, dequeue_atom::value, next.info.id);
        self->quit();
      },
      [=](bus::error_info) {});
}

caf::behavior job_actor(job_ptr self, context_ptr ctx, job_row row,
                        std::optional<bus::allocation_info> live, caf::actor node,
                        std::set<std::string> waiting_on, std::string failed_dep, bool resume) {
  auto& st = self->state;
  st.ctx = ctx;
  st.resume = resume;
  st.row = std::move(row);
  st.waiting_on = std::move(waiting_on);
  if (live) {
    st.alloc = live;
    bool starting = live->state == "starting";
    std::optional<bus::start_order> order;
    if (starting)
      order = make_order(st.row, *live, 0, st.resume);
    st.alloc_actor = self->spawn(allocation_actor, ctx, live->id, node, caf::actor{self}, order,
                                 !starting, st.row.info.state == std::string(job_state::stopping));
    reserve(self, est_end(self, live->started_ms ? live->started_ms : now_ms(self, *ctx)));
  } else if (!failed_dep.empty() && st.row.info.state == std::string(job_state::queued)) {
    fail_dependency(self, failed_dep, "failed");
  } else {
    enqueue(self);
  }
  return {
      [=](place_atom, const std::string& node_name, caf::actor node_actor,
          const bus::string_list& lanes, std::uint64_t floor) {
        auto& st = self->state;
        if (st.row.info.state != std::string(job_state::queued) || st.alloc) {
          self->send(st.ctx->scheduler, release_atom::value, st.row.info.id);
          return;
        }
        auto now = now_ms(self, *st.ctx);
        bus::allocation_info a;
        a.id = st.ctx->new_id();
        a.job = st.row.info.id;
        a.node = node_name;
        a.state = "starting";
        a.attempt = st.row.info.attempt + 1;
        a.lanes = lanes;
        a.created_ms = now;
        job_row next = st.row;
        next.info.state = job_state::starting;
        next.info.node = node_name;
        next.info.allocation = a.id;
        next.info.attempt = a.attempt;
        next.info.lanes = lanes;
        commit(
            self, {next, a},
            [=] {
              auto& st = self->state;
              st.row = next;
              st.alloc = a;
              st.ram_floor_bytes = floor;
              st.alloc_actor =
                  self->spawn(allocation_actor, st.ctx, a.id, node_actor, caf::actor{self},
                              make_order(next, a, floor, st.resume), false, false);
              publish(self);
            },
            [=](bus::error_info) {
              self->send(self->state.ctx->scheduler, release_atom::value, self->state.row.info.id);
              enqueue(self);
            });
      },
      [=](started_atom, const bus::report_req& r) -> caf::result<bus::report_rep> {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != r.allocation || st.alloc->state != "starting")
          return bus::report_rep{r.seq}; // duplicate or stale: nothing to do
        auto rp = self->make_response_promise<bus::report_rep>();
        auto now = now_ms(self, *st.ctx);
        auto a = *st.alloc;
        a.state = "running";
        a.started_ms = now;
        job_row next = st.row;
        if (next.info.state == std::string(job_state::starting))
          next.info.state = job_state::running;
        next.info.started_ms = now;
        commit(
            self, {next, a},
            [=]() mutable {
              self->state.row = next;
              self->state.alloc = a;
              publish(self);
              reserve(self, est_end(self, now));
              rp.deliver(bus::report_rep{r.seq});
            },
            [=](bus::error_info) mutable {
              rp.deliver(caf::make_error(caf::sec::request_timeout));
            });
        return rp;
      },
      [=](exited_atom, const bus::report_req& r) -> caf::result<bus::report_rep> {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != r.allocation)
          return bus::report_rep{r.seq};
        auto rp = self->make_response_promise<bus::report_rep>();
        auto now = now_ms(self, *st.ctx);
        auto a = *st.alloc;
        a.state = "finished";
        a.exit_code = r.exit_code;
        a.signal = r.signal;
        a.peak_ram_bytes = r.peak_ram_bytes;
        a.peak_vram_bytes = r.peak_vram_bytes;
        a.finished_ms = now;
        if (a.started_ms == 0 && r.reason != "launch_failed")
          a.started_ms = now;
        job_row next = st.row;
        auto& j = next.info;
        bool requeue = (r.reason == "fault" || r.reason == "checkpointed") &&
                       j.state != std::string(job_state::stopping);
        if (requeue) {
          // Not the job's own failure: a GPU fault on the node, or a checkpoint
          // after a yield request. Back to its old slot with a new allocation.
          a.reason = r.reason;
          j.state = job_state::queued;
          j.lanes.clear();
          bool resume = r.reason == "checkpointed";
          finish(
              self, a, next,
              [=]() mutable {
                self->state.resume = resume;
                rp.deliver(bus::report_rep{r.seq});
                enqueue(self);
              },
              [=](bus::error_info) mutable {
                rp.deliver(caf::make_error(caf::sec::request_timeout));
              });
          return rp;
        }
        j.exit_code = r.exit_code;
        j.signal = r.signal;
        j.finished_ms = now;
        if (j.state == std::string(job_state::stopping)) {
          j.state = job_state::cancelled, j.reason = "cancelled";
        } else if (r.reason == "launch_failed") {
          j.state = job_state::failed, j.reason = "launch_failed";
        } else if (r.reason == "timeout" || r.reason == "oom" || r.reason == "vram_cap") {
          j.state = job_state::failed, j.reason = r.reason;
        } else if (r.exit_code && *r.exit_code == 0 && !r.signal) {
          j.state = job_state::succeeded, j.reason = "";
        } else if (r.signal) {
          j.state = job_state::failed, j.reason = "signal";
        } else {
          j.state = job_state::failed, j.reason = "exit_code";
        }
        a.reason = j.reason;
        // Runs that ran to their own end feed the profile; cut-short runs do not.
        // An OOM run's peak (at its cap) still says the job needs more.
        if (r.reason != "launch_failed" && j.state != std::string(job_state::cancelled) &&
            r.reason != "timeout" && r.reason != "vram_cap")
          self->send(st.ctx->api, measure_atom::value,
                     measurement{j.profile, r.peak_ram_bytes, r.peak_vram_bytes, r.wall_ms});
        finish(
            self, a, next,
            [=]() mutable {
              rp.deliver(bus::report_rep{r.seq});
              self->quit();
            },
            [=](bus::error_info) mutable {
              rp.deliver(caf::make_error(caf::sec::request_timeout));
            });
        return rp;
      },
      [=](lost_atom, const std::string& alloc_id) {
        auto& st = self->state;
        if (!st.alloc || st.alloc->id != alloc_id)
          return;
        auto now = now_ms(self, *st.ctx);
        auto a = *st.alloc;
        a.state = "finished";
        a.reason = "lost";
        a.finished_ms = now;
        job_row next = st.row;
        bool cancelled = next.info.state == std::string(job_state::stopping);
        if (cancelled) {
          next.info.state = job_state::cancelled, next.info.reason = "cancelled";
          next.info.finished_ms = now;
        } else {
          // Back to its old slot (its rank is unchanged).
          next.info.state = job_state::queued;
          next.info.lanes.clear();
        }
        finish(
            self, a, next,
            [=] {
              if (cancelled)
                self->quit();
              else
                enqueue(self);
            },
            [=](bus::error_info) {});
      },
      [=](dep_atom, const std::string& dep, const std::string& dep_state) {
        auto& st = self->state;
        if (!st.waiting_on.count(dep))
          return;
        if (dep_state != job_state::succeeded) {
          if (st.row.info.state == std::string(job_state::queued))
            fail_dependency(self, dep, dep_state);
          return;
        }
        st.waiting_on.erase(dep);
        enqueue(self);
      },
      [=](move_atom, const std::string& priority, std::int64_t rank,
          const std::string& who) -> caf::result<api_reply> {
        auto& st = self->state;
        auto rp = self->make_response_promise<api_reply>();
        job_row next = st.row;
        next.info.priority = priority;
        next.rank = rank;
        auto now = now_ms(self, *st.ctx);
        commit(
            self, {next, audit_row{now, who, "owner", "move", next.info.id, priority}},
            [=]() mutable {
              auto& st = self->state;
              st.row = next;
              publish(self);
              enqueue(self); // re-keys a queued job in the scheduler's order
              if (st.alloc)
                reserve(self, est_end(self, st.alloc->started_ms ? st.alloc->started_ms
                                                                 : now_ms(self, *st.ctx)));
              rp.deliver(api_reply{bus::move_rep{next.info}});
            },
            [=](bus::error_info e) mutable { rp.deliver(api_reply{e}); });
        return rp;
      },
      [=](cancel_atom, const std::string& who) -> caf::result<api_reply> {
        auto& st = self->state;
        auto state = st.row.info.state;
        if (state == job_state::stopping)
          return api_reply{bus::cancel_rep{st.row.info}};
        auto rp = self->make_response_promise<api_reply>();
        auto now = now_ms(self, *st.ctx);
        job_row next = st.row;
        bool queued = state == job_state::queued;
        if (queued) {
          next.info.state = job_state::cancelled, next.info.reason = "cancelled";
          next.info.finished_ms = now;
        } else {
          next.info.state = job_state::stopping;
        }
        audit_row audit{now, who, "owner", "cancel", next.info.id, next.info.state};
        commit(
            self, {next, audit},
            [=]() mutable {
              auto& st = self->state;
              st.row = next;
              publish(self);
              rp.deliver(api_reply{bus::cancel_rep{next.info}});
              if (queued) {
                self->send(st.ctx->scheduler, dequeue_atom::value, next.info.id);
                self->quit();
              } else if (st.alloc_actor) {
                reserve(self, est_end(self, st.alloc->started_ms));
                self->send(st.alloc_actor, stop_atom::value);
              }
            },
            [=](bus::error_info e) mutable { rp.deliver(api_reply{e}); });
        return rp;
      },
  };
}

// ---- node -------------------------------------------------------------------

struct node_state {
  context_ptr ctx;
  node_row row;                                       ///< committed node row
  node_link_actor link;                               ///< carries orders to the node
  bus::node_info info;                                ///< latest telemetry
  std::unordered_map<std::string, caf::actor> allocs; ///< live allocations here
  std::string peer;                                   ///< current routing id
  std::vector<bus::alloc_usage> usage;                ///< latest per-allocation usage
  static inline const char* name = "cq.node";
};

using node_ptr = caf::stateful_actor<node_state>*;

void announce(node_ptr self) {
  auto& st = self->state;
  st.info.state = st.row.state;
  st.info.running = st.allocs.size();
  self->send(st.ctx->scheduler, node_atom::value,
             node_status{st.row.name, st.row.state == "approved", st.info.last_heartbeat_ms,
                         st.info, caf::actor{self}, st.usage});
  self->send(st.ctx->api, info_atom::value, st.info);
}

void set_peer(node_ptr self, const std::string& peer) {
  auto& st = self->state;
  if (peer == st.peer)
    return;
  bool reconnected = !st.peer.empty();
  st.peer = peer;
  self->send(st.link, peer_atom::value, peer);
  if (reconnected)
    for (auto& [id, a] : st.allocs)
      self->send(a, resend_atom::value);
}

caf::behavior node_actor(node_ptr self, context_ptr ctx, node_row row) {
  auto& st = self->state;
  st.ctx = ctx;
  st.row = std::move(row);
  st.info.name = st.row.name;
  st.info.state = st.row.state;
  st.link = ctx->make_link(self->system(), st.row.name);
  self->link_to(st.link);
  return {
      [=](beat_atom, const std::string& peer, const bus::heartbeat_req& hb) {
        auto& st = self->state;
        set_peer(self, peer);
        st.info.mem_total_bytes = hb.mem_total_bytes;
        st.info.mem_available_bytes = hb.mem_available_bytes;
        st.info.cpus = hb.cpus;
        st.info.lanes = hb.lanes.value_or(std::vector<bus::lane_info>{});
        st.info.ram_reserve_bytes = hb.ram_reserve_bytes.value_or(0);
        st.info.ram_floor_bytes = hb.ram_floor_bytes.value_or(0);
        st.info.vram_cap_bytes = hb.vram_cap_bytes;
        st.info.mem_cap_mode = hb.mem_cap_mode.value_or("");
        st.info.fault = hb.fault;
        st.info.holds = hb.holds.value_or(std::vector<bus::hold_info>{});
        st.info.outside_gpu_processes =
            hb.outside_gpu_processes.value_or(std::vector<bus::gpu_process>{});
        st.info.busy_probes = hb.busy_probes.value_or(bus::string_list{});
        st.usage = hb.usage.value_or(std::vector<bus::alloc_usage>{});
        st.info.last_heartbeat_ms = now_ms(self, *st.ctx);
        st.info.online = true;
        // Work the node runs that the coordinator no longer tracks here (lost
        // and given away, or cancelled before the node confirmed) is stopped.
        for (auto& id : hb.allocations)
          if (!st.allocs.count(id))
            self->send(st.link, bus::stop_order{id, 0});
        announce(self);
        return bus::heartbeat_rep{st.row.state == "approved"};
      },
      [=](report_atom, const std::string& peer,
          const bus::report_req& r) -> caf::result<bus::report_rep> {
        auto& st = self->state;
        set_peer(self, peer);
        auto i = st.allocs.find(r.allocation);
        // An allocation that is no longer live here already has its outcome
        // committed (or was given away): acknowledge so the node stops re-sending.
        if (i == st.allocs.end())
          return bus::report_rep{r.seq};
        return forward(self, i->second, report_atom::value, r);
      },
      [=](approve_atom) {
        self->state.row.state = "approved";
        announce(self);
      },
      [=](attach_atom, const std::string& id, caf::actor a) {
        self->state.allocs[id] = std::move(a);
        self->state.info.running = self->state.allocs.size();
      },
      [=](detach_atom, const std::string& id) {
        self->state.allocs.erase(id);
        announce(self);
      },
      [=](bus::start_order& o) { self->send(self->state.link, std::move(o)); },
      [=](bus::stop_order& o) { self->send(self->state.link, std::move(o)); },
      [=](bus::read_log_order& o) { return self->delegate(self->state.link, std::move(o)); },
      [=](bus::yield_order& o) { self->send(self->state.link, std::move(o)); },
      [=](bus::release_order& o) -> caf::result<order_reply> {
        // The coordinator stops honouring the hold as soon as the node confirms;
        // the node's next heartbeat says the same.
        auto rp = self->make_response_promise<order_reply>();
        auto id = o.hold;
        self->request(self->state.link, std::chrono::seconds(10), std::move(o))
            .then(
                [=](order_reply r) mutable {
                  if (r.ok) {
                    auto& h = self->state.info.holds;
                    h.erase(std::remove_if(h.begin(), h.end(), [&](auto& x) { return x.id == id; }),
                            h.end());
                    announce(self);
                  }
                  rp.deliver(std::move(r));
                },
                [=](caf::error& e) mutable {
                  rp.deliver(order_reply{false, {}, {errc::unavailable, to_string(e)}});
                });
        return rp;
      },
      [=](bus::clear_fault_order& o) -> caf::result<order_reply> {
        auto rp = self->make_response_promise<order_reply>();
        self->request(self->state.link, std::chrono::seconds(10), std::move(o))
            .then(
                [=](order_reply r) mutable {
                  if (r.ok) {
                    self->state.info.fault.reset();
                    announce(self);
                  }
                  rp.deliver(std::move(r));
                },
                [=](caf::error& e) mutable {
                  rp.deliver(order_reply{false, {}, {errc::unavailable, to_string(e)}});
                });
        return rp;
      },
  };
}

} // namespace

caf::actor spawn_store(caf::actor_system& sys, std::shared_ptr<store> db, bool detached) {
  return detached ? sys.spawn<caf::detached>(store_actor, std::move(db))
                  : sys.spawn(store_actor, std::move(db));
}

caf::actor spawn_scheduler(caf::actor_system& sys, context_ptr ctx) {
  return sys.spawn(scheduler_actor, std::move(ctx));
}

caf::actor spawn_node(caf::actor_system& sys, context_ptr ctx, node_row row) {
  return sys.spawn(node_actor, std::move(ctx), std::move(row));
}

caf::actor spawn_job(caf::actor_system& sys, context_ptr ctx, job_row row,
                     std::optional<bus::allocation_info> live, caf::actor node,
                     std::set<std::string> waiting_on, std::string failed_dep, bool resume) {
  return sys.spawn(job_actor, std::move(ctx), std::move(row), std::move(live), std::move(node),
                   std::move(waiting_on), std::move(failed_dep), resume);
}

} // namespace cq::coord
