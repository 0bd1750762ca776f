// cq-sim's world (see world.hpp): the scheduler loop and the coordinator's
// lifecycle; the network, workload, faults and checkers have their own files.
#include "vfs.hpp"
#include "world_impl.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace cq::sim {
namespace detail {

world::world(const options& opt) : opt_(opt), rng_(opt.seed) {
  if (opt_.study) {
    heartbeat_ms_ = opt_.heartbeat_ms > 0 ? opt_.heartbeat_ms : 3'600'000;
    poll_every_ms_ = 7 * 24 * 3'600'000;
    drain_ms_ = std::max<std::int64_t>(drain_ms_, 3 * heartbeat_ms_);
  }
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
  if (opt_.study)
    sim_vfs_untracked(dir_.string()); // no power losses: nothing to take back
  for (auto& d : opt_.defects)
    if (!set_defect(defects_, d))
      throw std::runtime_error("unknown defect: " + d);
  // Every state change goes through one transition function per machine
  // (coordinator/policy/transitions.hpp); the world sees each one.
  prev_observer_ = policy::observe_transitions(
      [this](std::string_view machine, const std::string&, std::string_view, std::string_view) {
        ++res_.transitions[std::string(machine)];
      });
  if (!open_store())
    throw std::runtime_error("cannot open the store");
  coord::init_owner(*db_, owner_person.name, owner_person.token, 1'700'000'000'000);
  for (auto& p : people)
    coord::add_token(*db_, p.name, p.role, p.token, 1'700'000'000'000);
}

world::~world() {
  kill_incarnation();
  for (auto& n : nodes_)
    n.model->crash();
  sched_->run();
  ctx_.reset();
  real_store_ = nullptr;
  sys_.reset();
  db_.reset();
  sim_vfs_forget(dir_.string());
  policy::observe_transitions(std::move(prev_observer_));
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

bool world::open_store() {
  coord::store_options o;
  o.vfs = sim_vfs_name();
  if (defects_.store_sync_normal)
    o.synchronous = "NORMAL";
  // A study has no power loss for a sync to guard against (and no checker
  // that looks): its commits need not wait for one.
  if (opt_.study)
    o.synchronous = "OFF";
  // A study's store never outlives the run, nor meets a crash: it lives in
  // SQLite's memdb (no file, no writes to one).
  if (opt_.study)
    o.vfs = "memdb";
  try {
    db_ = std::make_shared<coord::store>(
        opt_.study ? "/" + dir_.filename().string() + ".db" : (dir_ / "cq.db").string(), o);
    return true;
  } catch (const std::exception& e) {
    violation("store_damaged", fmt::format("the coordinator's store does not open: {}", e.what()));
    return false;
  }
}

void world::close_store(bool power) {
  sim_vfs_crash(dir_.string());
  // The dead incarnation's store actors take their exit now (and any message
  // before it fails on the dead file), so that the store's last reference,
  // and with it the SQLite connection, goes away.
  std::vector<caf::actor> store_actors;
  if (ctx_)
    store_actors.push_back(caf::actor_cast<caf::actor>(ctx_->store));
  if (real_store_)
    store_actors.push_back(caf::actor_cast<caf::actor>(real_store_));
  for (int i = 0; db_ && db_.use_count() > 1 && i < 100'000; ++i) {
    bool ran = false;
    for (auto& a : store_actors)
      if (sched_->prioritize(a)) {
        sched_->run_once();
        ran = true;
      }
    if (!ran)
      break;
  }
  if (db_.use_count() > 1)
    throw std::logic_error("cq-sim: a crashed coordinator's store stays open");
  db_.reset();
  real_store_ = nullptr;
  if (!power)
    return;
  auto rep = sim_vfs_power_loss(dir_.string(), rng_, 0.5);
  trace(fmt::format("coordinator's disk after the power loss: {} unsynced changes lost, {} kept "
                    "(in {} files)",
                    rep.changes_lost, rep.changes_kept, rep.files));
}

void world::kill_incarnation() {
  if (!ctx_)
    return;
  caf::anon_send_exit(ctx_->api, caf::exit_reason::kill);
  caf::anon_send_exit(ctx_->scheduler, caf::exit_reason::kill);
  caf::anon_send_exit(ctx_->store, caf::exit_reason::kill);
  caf::anon_send_exit(bridge_, caf::exit_reason::kill);
  for (auto& l : links_)
    caf::anon_send_exit(l, caf::exit_reason::kill);
  links_.clear();
}

std::int64_t world::now() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(sched_->clock().now() - t0_).count();
}

void world::mix(std::string_view bytes) {
  // FNV-1a over 8-byte words (then the tail byte by byte): every frame's
  // bytes pass here, a byte at a time was 1% of a study's instructions.
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    hash_ = (hash_ ^ w) * 1099511628211ull;
  }
  for (; i < bytes.size(); ++i)
    hash_ = (hash_ ^ static_cast<unsigned char>(bytes[i])) * 1099511628211ull;
}

void world::trace(const std::string& line) {
  auto l = fmt::format("{:>10.3f} {}", static_cast<double>(now()) / 1000, line);
  mix(l);
  if (opt_.verbose)
    fmt::print("{}\n", l);
  history_.push_back(l);
  if (history_.size() > history_lines)
    history_.pop_front();
  tail_.push_back(std::move(l));
  if (tail_.size() > opt_.tail)
    tail_.pop_front();
}

namespace {

/// Whether `line` names `subject` as a whole word ("n1" is not in "n10").
bool mentions(std::string_view line, std::string_view subject) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; };
  for (auto at = line.find(subject); at != std::string_view::npos;
       at = line.find(subject, at + 1)) {
    auto end = at + subject.size();
    if ((at == 0 || !word(line[at - 1])) && (end == line.size() || !word(line[end])))
      return true;
  }
  return false;
}

} // namespace

void world::violation(const std::string& name, const std::string& msg,
                      const std::vector<std::string>& subjects) {
  if (!res_.ok)
    return;
  trace(fmt::format("VIOLATION {}: {}", name, msg));
  res_.ok = false;
  res_.violation = name;
  res_.message = msg;
  res_.tail.assign(tail_.begin(), tail_.end());
  // The story: every remembered line that names one of the subjects (the
  // job, its allocations, the node), which is the shortest trace that
  // shows the failure; at most story_lines of its latest.
  res_.subjects = subjects;
  if (!subjects.empty()) {
    for (auto& l : history_)
      if (std::any_of(subjects.begin(), subjects.end(),
                      [&](const std::string& s) { return mentions(l, s); }))
        res_.story.push_back(l);
    if (res_.story.size() > story_lines)
      res_.story.erase(res_.story.begin(),
                       res_.story.end() - static_cast<std::ptrdiff_t>(story_lines));
  }
  stopped_ = true;
}

void world::start_coordinator() {
  if (!db_ && !open_store())
    return;
  ++gen_;
  context c;
  c.epoch_ms = 1'700'000'000'000 + now();
  c.steady = sched_->clock().now();
  c.new_id = [this] { return fmt::format("a{}", ++next_id_); };
  c.new_allocation_id = [this](std::int64_t) { return fmt::format("a{}", ++next_id_); };
  c.new_token = [this] { return fmt::format("t{}-{}", ++next_id_, rng_()); };
  c.new_invite_code = [this] { return fmt::format("i{}-{}", ++next_id_, rng_()); };
  c.new_order_id = [this] { return ++next_order_; };
  c.cfg.defects = defects_;
  if (opt_.history_jobs)
    c.cfg.history_jobs = opt_.history_jobs;
  if (opt_.study) {
    // A study: production's leases, yield grace and start timeout
    // (actors::config's defaults); a node is fresh for 5 heartbeats and down
    // after 30, as production's 1 s heartbeat, 5 s and 30 s.
    c.cfg.heartbeat_fresh_ms = 5 * heartbeat_ms_;
    c.cfg.node_timeout_ms = 30 * heartbeat_ms_;
  } else {
    // Short enough that partitions, crashes and restarts reach them (a node is
    // cut off for up to 25 s; a lost-after of 10 s follows an 8 s timeout), and
    // leases that long jobs cross several times.
    c.cfg.node_timeout_ms = 8'000;
    c.cfg.lost_after_ms = 10'000;
    // A start no connection took is fenced after 10 s: shorter than many
    // partitions, so that start orders expire in the sockets' backlogs.
    c.cfg.start_timeout = std::chrono::seconds(10);
    c.cfg.lease_ms = 60'000;
    c.cfg.yield_grace = std::chrono::seconds(20);
  }
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
  c.observe_pass = [this](const policy::cluster_view& cl, policy::queue_ref q,
                          const policy::plan& p) { check_pass(cl, q, p); };
  c.make_link = [this, gen](caf::actor_system& s, const std::string& name, node_actor) {
    auto l = s.spawn(sim_link, this, gen, name);
    links_.push_back(caf::actor_cast<caf::actor>(l));
    return l;
  };
  coord::spawn_options so;
  so.detached_store = false;
  auto plan = plan_;
  so.wrap_store = [this, plan](caf::actor_system& s, store_actor real) {
    real_store_ = real;
    return spawn_faulty_store(s, real, plan);
  };
  try {
    ctx_ = coord::spawn_coordinator(*sys_, db_, std::move(c), so);
  } catch (const std::exception& e) {
    violation("store_damaged", fmt::format("the coordinator does not recover: {}", e.what()));
    return;
  }
  bridge_ = coord::spawn_bridge(
      *sys_,
      [this, gen](const std::string& peer, std::string bytes) {
        reply_out(gen, peer, std::move(bytes));
      },
      // Every client's submit replies ahead, as the local socket's do in
      // production: the checkers judge those replies too.
      ctx_->api, [](const std::string&) { return true; });
  coord_up_ = true;
  crash_pending_ = false;
  trace(fmt::format("coordinator starts (incarnation {})", gen));
  // Every node's connection is new (the ROUTER socket is).
  for (auto& n : nodes_) {
    n.reconnect();
    n.fault_seen_ms.reset();
  }
  if (gen > 1) {
    check_listing();
    poll_jobs(false); // what the recovery read from the store
  }
}

void world::crash_coordinator(const std::string& why, bool power) {
  if (!coord_up_)
    return;
  trace(fmt::format("coordinator {} ({})", power ? "loses power" : "crashes", why));
  ++res_.faults[power ? "coordinator_power_loss" : "coordinator_crash"];
  coord_up_ = false;
  ++gen_; // every effect of the old incarnation is dropped at the boundary
  kill_incarnation();
  close_store(power);
  lose_calls();
  for (auto& n : nodes_)
    n.fault_seen_ms.reset();
}

namespace {

template <class Rep>
api_reply decode_reply(const bus::frame& f) {
  if (!f.ok)
    return api_reply{f.error};
  if constexpr (std::is_void_v<Rep>) {
    return api_reply{bus::error_info{errc::internal, "cq-sim: no reply type for this request"}};
  } else {
    auto r = bus::decode_body<Rep>(f);
    if (!r)
      return api_reply{r.error()};
    return api_reply{std::move(*r)};
  }
}

} // namespace

void world::call(bus::coordinator_request body, std::function<void(std::optional<api_reply>)> done,
                 const person& who) {
  if (!coord_up_) {
    at(now() + 1, [done] { done(std::nullopt); });
    return;
  }
  auto id = ++next_call_;
  // The bytes `cq` would send, taken apart as the gateway takes them apart.
  auto bytes = bus::encode_coordinator_request(id, who.token, body);
  std::uint64_t seen = 0;
  auto f = bus::decode_frame(bytes, seen);
  auto req =
      f ? bus::decode_coordinator_request(*f) : bus::result<bus::coordinator_request>(f.error());
  if (!req) {
    violation("codec", fmt::format("a request does not decode: {}", req.error().message));
    return;
  }
  auto decode = std::visit(
      [](auto& r) -> std::function<api_reply(const bus::frame&)> {
        using Rep = typename reply_of<std::decay_t<decltype(r)>>::type;
        return [](const bus::frame& fr) { return decode_reply<Rep>(fr); };
      },
      body);
  calls_[id] = pending_call{std::move(done), std::move(decode)};
  caf::anon_send(bridge_, api_request{client_peer, f->id, f->token, std::move(*req)});
  at(now() + 30'000, [this, id] {
    auto it = calls_.find(id);
    if (it == calls_.end())
      return;
    auto d = std::move(it->second.done);
    calls_.erase(it);
    d(std::nullopt);
  });
}

void world::client_reply(const std::string& bytes) {
  std::uint64_t seen = 0;
  auto f = bus::decode_frame(bytes, seen);
  if (!f) {
    violation("codec", fmt::format("a reply does not decode: {}", f.error().message));
    return;
  }
  auto it = calls_.find(f->id);
  if (it == calls_.end())
    return; // answered after its deadline
  auto call = std::move(it->second);
  calls_.erase(it);
  call.done(call.decode(*f));
}

void world::lose_calls() {
  auto lost = std::move(calls_);
  calls_.clear();
  for (auto& [id, c] : lost)
    at(now() + 1, [done = std::move(c.done)] { done(std::nullopt); });
}

bool world::fire_due() {
  auto& sch = sched_->clock().schedule();
  auto t_sim = events_.empty() ? INT64_MAX : events_.begin()->first;
  std::int64_t t_caf = INT64_MAX;
  if (!sch.empty())
    t_caf = std::chrono::duration_cast<std::chrono::milliseconds>(sch.begin()->first - t0_).count();
  auto t = std::min(t_sim, t_caf);
  if (t > now())
    return false;
  if (t_caf <= t_sim) {
    sched_->trigger_timeout();
  } else {
    auto ev = std::move(events_.begin()->second);
    events_.erase(events_.begin());
    ev();
  }
  return true;
}

std::int64_t world::cost_of(caf::resumable* job) {
  auto* a = dynamic_cast<caf::local_actor*>(job);
  if (!a)
    return 0;
  std::string_view name = a->name();
  // A commit's fsync; the node's telemetry (an nvidia-smi call) now and then.
  if (name == "cq.store")
    return uniform(rng_, 1, 4);
  if (name == "cq.node.daemon" && chance(rng_, 0.05))
    return uniform(rng_, 20, 60);
  return 0;
}

result world::run() {
  auto& f = opt_.faults;
  auto commit_fail = f.commit_fail;
  auto wall0 = opt_.wall_clock ? opt_.wall_clock() : 0.0;
  setup_nodes();
  if (!opt_.workload_file.empty())
    load_workload();
  else if (opt_.study)
    generate_study();
  else
    generate();
  register_owners();
  // First: the run's figures (a fleet file or a workload file gives them).
  res_.parameters =
      fmt::format(
          "seed {} nodes {} jobs {} faults [{}]{}{}\n", opt_.seed, nodes_.size(), jobs_.size(),
          opt_.faults.describe(),
          opt_.defects.empty() ? "" : " defects " + fmt::format("{}", fmt::join(opt_.defects, ",")),
          opt_.study ? fmt::format(" study, heartbeats every {} s", heartbeat_ms_ / 1000) : "") +
      (opt_.history_jobs ? fmt::format("history_jobs {}\n", opt_.history_jobs) : "") +
      res_.parameters;
  res_.jobs_generated = static_cast<int>(jobs_.size());
  job_ids_.assign(jobs_.size(), "");
  dep_sent_.assign(jobs_.size(), "");
  first_sent_.assign(jobs_.size(), -1);
  acked_ms_.assign(jobs_.size(), -1);
  for (std::size_t k = 0; k < jobs_.size(); ++k)
    plan_of_[client_job_id(k)] = k;
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
  plan_->on_twice = [this](const std::string& job, const std::set<std::string>& live) {
    std::vector<std::string> subjects{job};
    subjects.insert(subjects.end(), live.begin(), live.end());
    violation(
        "job_twice",
        fmt::format("job {} has {} live allocations in the coordinator's store", job, live.size()),
        subjects);
  };
  plan_->on_job = [this](const bus::job_info& j) { observe(j, true); };
  plan_->fail = [this, commit_fail](const change_batch&) {
    if (!chance(rng_, commit_fail))
      return false;
    ++res_.faults["commit_failure"];
    trace("store: commit fails");
    return true;
  };
  if (f.commit_crashes)
    plan_->crash_after = [this, power = f.power_loss](const change_batch& b) {
      if (!coord_up_ || !now_.empty() || now() >= fault_end_ms_)
        return false;
      // Mostly right after a submit's commit: its client retries with the
      // same job id, and the replay path answers.
      bool queued = std::any_of(b.begin(), b.end(), [](auto& c) {
        auto* j = std::get_if<job_row>(&c);
        return j && j->info.state == job_state::queued;
      });
      if (!chance(rng_, queued ? 1.0 / 30 : 1.0 / 2000))
        return false;
      bool lose = power && chance(rng_, 0.5);
      now_.push_back([this, lose] {
        ++res_.faults["commit_crash"];
        crash_coordinator("right after a commit, before its reply", lose);
        at(now() + uniform(rng_, 500, 10'000), [this] {
          if (!coord_up_)
            start_coordinator();
        });
      });
      return true;
    };
  for (std::size_t k = 0; k < jobs_.size(); ++k)
    at(jobs_[k].at_ms, [this, k] { submit(k, 0); });
  schedule_faults();
  at(fault_end_ms_, [this] { heal(); });
  poll_jobs(true);
  // Liveness bound: the longest job twice over plus the queue's work spread
  // over the nodes, and ten minutes of slack.
  std::int64_t work = 0, longest = 0;
  double lane_work = 0;
  for (auto& j : jobs_) {
    work += j.w.run_ms, longest = std::max(longest, j.w.run_ms);
    lane_work += static_cast<double>(j.spec.gpus.value_or(0)) * static_cast<double>(j.w.run_ms);
  }
  deadline_ms_ = fault_end_ms_ + 2 * longest + work / std::max(1, opt_.nodes) + 600'000;
  // A queue may be GPU-bound (a study's, or a swarm's whose fleet has few
  // lanes): its lanes' work on top, as only they can do it.
  if (lanes_total_)
    deadline_ms_ += static_cast<std::int64_t>(lane_work / static_cast<double>(lanes_total_));
  while (!stopped_) {
    if (!now_.empty()) {
      auto act = std::move(now_.front());
      now_.pop_front();
      act();
      continue;
    }
    if (sched_->has_job()) {
      // Faults at any point: a due world event or timer may come first.
      if (f.anywhere && chance(rng_, 0.25) && fire_due())
        continue;
      auto n = sched_->jobs.size();
      if (n > 1) {
        auto i = static_cast<std::size_t>(rng_() % n);
        std::swap(sched_->jobs[0], sched_->jobs[i]);
      }
      auto cost = f.anywhere ? cost_of(sched_->jobs[0]) : 0;
      sched_->run_once();
      ++res_.steps;
      if (cost > 0)
        sched_->clock().current_time += std::chrono::milliseconds(cost);
      continue;
    }
    if (done()) {
      // Checker not_idle: every node ends idle, within a bound.
      if (!draining_) {
        draining_ = true;
        drain_from_ms_ = now();
        drain_end_ms_ = now() + drain_ms_;
        trace("every job has ended; waiting for every node to be idle");
      }
      if (busy_node().empty())
        break;
    }
    auto& sch = sched_->clock().schedule();
    auto t_sim = events_.empty() ? INT64_MAX : events_.begin()->first;
    std::int64_t t_caf = INT64_MAX;
    if (!sch.empty())
      t_caf =
          std::chrono::duration_cast<std::chrono::milliseconds>(sch.begin()->first - t0_).count();
    auto t = std::min(t_sim, t_caf);
    if (t == INT64_MAX)
      break;
    if (draining_ && done() && t > drain_end_ms_) {
      auto why = busy_node();
      violation("not_idle", fmt::format("{} s after every job ended, {}", drain_ms_ / 1000, why),
                {why.substr(0, why.find(':'))});
      break;
    }
    if (!(draining_ && done()) && t > deadline_ms_) {
      std::string open;
      std::vector<std::string> stuck;
      for (auto& [id, st] : plan_->job_states)
        if (!is_terminal(st) && stuck.size() < 5) {
          open += fmt::format(" {}({})", id, st);
          stuck.push_back(id);
        }
      violation("liveness",
                fmt::format("{} accepted jobs not terminal {} s after the faults "
                            "ended:{}",
                            plan_->open_jobs, (deadline_ms_ - fault_end_ms_) / 1000, open),
                stuck);
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
  }
  sample();
  res_.sim_ms = now();
  res_.idle_after_ms = draining_ ? now() - drain_from_ms_ : 0;
  res_.lost = static_cast<int>(plan_->lost_while_down.size());
  for (auto& [id, st] : plan_->job_states) {
    // A failed job by its reason: failed/exit_code, failed/timeout...
    auto key = std::string(to_string(st));
    if (auto e = committed_end_.find(id); e != committed_end_.end() && st == job_state::failed)
      key += fmt::format("/{}", e->second.reason);
    ++res_.outcomes[key];
  }
  if (res_.sim_ms > 0) {
    res_.ram_util = ram_area_ / static_cast<double>(res_.sim_ms);
    res_.gpu_util = gpu_area_ / static_cast<double>(res_.sim_ms);
    res_.cpu_util = cpu_area_ / static_cast<double>(res_.sim_ms);
  }
  res_.trace_hash = hash_;
  if (!opt_.report_file.empty()) {
    auto wall = opt_.wall_clock ? opt_.wall_clock() - wall0 : 0.0;
    std::ofstream out(opt_.report_file, std::ios::trunc);
    out << report_json(wall);
    if (!out.flush())
      throw std::runtime_error("cannot write " + opt_.report_file);
  }
  return res_;
}

} // namespace detail

result run(const options& opt) {
  // CQ_SIM_LOG=debug (or info, warn...) shows the actors' own logs.
  auto* lvl = std::getenv("CQ_SIM_LOG");
  spdlog::set_level(lvl ? spdlog::level::from_str(lvl) : spdlog::level::off);
  try {
    detail::world w(opt);
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
