// cq-sim's workload: nodes, the seeded generator, JSON-lines traces, and the
// clients that submit and cancel.
#include "world_impl.hpp"

#include "policy/spec.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace cq::sim::detail {

void world::setup_nodes() {
  if (!opt_.fleet_file.empty()) {
    std::ifstream in(opt_.fleet_file);
    if (!in)
      throw std::runtime_error("cannot read " + opt_.fleet_file);
    std::stringstream text;
    text << in.rdbuf();
    for (auto& s : parse_fleet(text.str(), opt_.fleet_file))
      add_node(std::move(s));
    opt_.nodes = static_cast<int>(nodes_.size());
    return;
  }
  for (int i = 0; i < opt_.nodes; ++i) {
    node_spec s;
    s.name = fmt::format("n{}", i);
    s.mem_total_bytes = static_cast<std::uint64_t>(uniform(rng_, 16, 128)) << 30;
    s.ram_reserve_bytes = 1ull << 30;
    s.cpus = static_cast<std::uint64_t>(uniform(rng_, 8, 64));
    static const int gpu_counts[] = {0, 0, 2, 4, 8};
    s.gpus = gpu_counts[uniform(rng_, 0, 4)];
    s.vram_bytes = static_cast<std::uint64_t>(uniform(rng_, 24, 80)) << 30;
    s.cgroups = chance(rng_, 0.5);
    add_node(std::move(s));
  }
}

void world::add_node(node_spec s) {
  {
    ram_total_ += s.mem_total_bytes - s.ram_reserve_bytes;
    lanes_total_ += static_cast<std::uint64_t>(s.gpus);
    cpus_total_ += s.cpus;
    std::string vram;
    if (s.gpus)
      vram = s.lane_vram_bytes.empty()
                 ? fmt::format(" of {} GiB", s.vram_bytes >> 30)
                 : fmt::format(" of {} GiB", fmt::join(s.lane_vram_gib(), "/"));
    res_.parameters += fmt::format("node {}: {} GiB, {} cpus, {} GPUs{}, memory caps by {}\n",
                                   s.name, s.mem_total_bytes >> 30, s.cpus, s.gpus, vram,
                                   s.cgroups ? "cgroup" : "watchdog");
    sim_node n;
    n.name = s.name;
    auto idx = nodes_.size();
    node_env env;
    env.now_ms = [this] { return now(); };
    env.send = [this, idx](const std::string& bytes) { from_node(idx, bytes); };
    env.send_decoded = [this, idx](const std::string& bytes, std::shared_ptr<decoded_frame> d) {
      from_node(idx, bytes, std::move(d));
    };
    env.at = [this](std::int64_t t, std::function<void()> f) { at(t, std::move(f)); };
    env.trace = [this](const std::string& l) { trace(l); };
    env.on_start = [this, idx](const std::string&, const bus::start_order& o) { on_start(idx, o); };
    env.on_end = [this, idx](const std::string&, const std::string& alloc, const std::string& job) {
      on_end(idx, alloc, job);
    };
    env.on_exit_acked = [this](const std::string& alloc) {
      if (!plan_->finished_allocs.count(alloc))
        violation(
            "ack_before_commit",
            fmt::format("the exit of allocation {} was acknowledged before it was stored", alloc),
            {alloc});
    };
    n.model = std::make_unique<node_host>(
        // The disk is simulated (in memory): a fixed path keeps every error
        // text, and so the trace, the same from run to run.
        *sys_, s, std::move(env), fs::path("/sim/nodes") / s.name,
        [this, idx] {
          // A partition that keeps the connection queues what is sent.
          return coord_up_ && (!nodes_[idx].partitioned || nodes_[idx].keeps_connection);
        },
        rng_());
    if (opt_.study)
      n.model->set_timing({heartbeat_ms_, static_cast<std::uint64_t>(heartbeat_ms_), true, 60'000});
    if (opt_.faults.disk_faults) {
      sim_disk::fault_plan plan;
      auto name = s.name;
      plan.fail = [this, name](std::string_view op,
                               const fs::path& path) -> std::optional<std::string> {
        // A directory's sync fails only for an allocation's own directory
        // (the oracle permits launch_failed for the allocation it names).
        if (op == "sync" && path.parent_path().filename() != "allocations")
          return std::nullopt;
        if (now() >= fault_end_ms_ || !chance(rng_, 1.0 / 300))
          return std::nullopt;
        // <state>/allocations/<id>/...: the oracle permits launch_failed for it.
        for (auto it = path.begin(); it != path.end(); ++it)
          if (*it == "allocations" && std::next(it) != path.end())
            disk_failed_allocs_.insert(std::next(it)->string());
        bool full = chance(rng_, 0.5);
        ++res_.faults[full ? "disk_full" : "disk_eio"];
        trace(fmt::format("{}: a disk {} fails ({})", name, op, full ? "ENOSPC" : "EIO"));
        return std::string(full ? "No space left on device" : "Input/output error");
      };
      // The other allocations a failed sync of allocations/ left unsynced
      // (a group of starts, ADR 0068): their launches fail with it.
      plan.lost = [this](const fs::path& path) {
        if (path.parent_path().filename() == "allocations")
          disk_failed_allocs_.insert(path.filename().string());
      };
      plan.torn = [this](std::size_t n) {
        auto keep = static_cast<std::size_t>(uniform(rng_, 0, static_cast<std::int64_t>(n)));
        if (keep > 0 && keep < n)
          ++res_.faults["torn_append"];
        return keep;
      };
      n.model->set_disk_faults(std::move(plan));
    }
    nodes_.push_back(std::move(n));
  }
}

void world::boot_node(std::size_t i) {
  auto& n = nodes_[i];
  // Fault kind clock_skew: each node's wall clock has its own offset, and
  // steps (an NTP correction, a drifted RTC) when its daemon restarts. The
  // daemon reads the wall clock once at its start and counts on its
  // monotonic clock after, as in production.
  if (opt_.faults.clock_skew && (!n.booted || chance(rng_, 0.3))) {
    auto step = n.booted ? uniform(rng_, -30'000, 30'000) : uniform(rng_, -5000, 5000);
    n.clock_offset_ms += step;
    if (n.booted)
      ++res_.faults["clock_jump"];
    // And it drifts: up to 0.5% fast or slow (seconds over a run, where a
    // real clock's 100 ppm would be milliseconds), so that the coordinator's
    // estimate of the node's clock must follow its heartbeats.
    auto ppm = n.booted ? n.clock_ppm : uniform(rng_, -5000, 5000);
    n.clock_ppm = ppm;
    trace(fmt::format("{}'s clock is {} ms off the coordinator's, drifting {} ppm", n.name,
                      n.clock_offset_ms, ppm));
    n.model->set_clock_offset(n.clock_offset_ms);
    n.model->set_clock_rate(1.0 + static_cast<double>(ppm) / 1e6);
  }
  n.booted = true;
  n.reconnect();
  // A daemon that cannot open its state dir (a disk fault) exits; its
  // service manager starts it again 5 s later.
  if (!n.model->boot(n.token))
    at(now() + 5000, [this, i] {
      if (!nodes_[i].model->up())
        boot_node(i);
    });
}

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
    if (max_gpus && chance(rng_, 0.3)) {
      s.gpus =
          static_cast<std::uint64_t>(std::min<std::int64_t>(max_gpus, chance(rng_, 0.8) ? 1 : 2));
      // VRAM it uses on each lane; some declare a cap, a few of them too low.
      j.w.vram_bytes = static_cast<std::uint64_t>(uniform(rng_, 1, 16)) << 30;
      if (chance(rng_, 0.3))
        s.vram_bytes =
            chance(rng_, 0.9) ? j.w.vram_bytes + (j.w.vram_bytes >> 1) : j.w.vram_bytes >> 1;
      // A few need more VRAM than the smallest lanes have: only some nodes'
      // lanes take them (the checker vram_over sees one placed on another).
      std::uint64_t widest = 0;
      for (auto& n : nodes_)
        if (static_cast<std::uint64_t>(n.model->spec().gpus) >= *s.gpus)
          widest = std::max(widest, n.model->spec().vram_bytes);
      if ((widest >> 30) > 30 && chance(rng_, 0.15)) {
        s.vram_bytes =
            static_cast<std::uint64_t>(uniform(rng_, 30, static_cast<std::int64_t>(widest >> 30)))
            << 30;
        j.w.vram_bytes = *s.vram_bytes / 10 * 8;
      }
    }
    // Mostly short jobs, a few long ones.
    j.w.run_ms = chance(rng_, 0.9) ? uniform(rng_, 500, 60'000) : uniform(rng_, 60'000, 600'000);
    total_run += j.w.run_ms;
    j.w.exit_code = chance(rng_, 0.9) ? 0 : 1;
    if (chance(rng_, 0.6))
      s.cpus = static_cast<std::uint64_t>(uniform(rng_, 1, 8)); // every node has at least 8
    if (opt_.faults.ignore_term && chance(rng_, 0.05)) {
      j.w.ignores_term = true;
      ++res_.faults["ignores_term"];
    }
    if (opt_.faults.child_crashes && chance(rng_, 0.03)) {
      j.w.crash_signal = 11;
      ++res_.faults["child_crash"];
    }
    if (opt_.faults.ooms && s.ram_bytes && chance(rng_, 0.02)) {
      j.w.over_cap = true;
      j.w.rss_bytes = *s.ram_bytes + (*s.ram_bytes >> 2);
      ++res_.faults["over_ram_cap"];
    }
    if (opt_.faults.escapees && chance(rng_, 0.03)) {
      j.w.escapee = true;
      ++res_.faults["escapee"];
    }
    if (opt_.faults.escapees && chance(rng_, 0.02)) {
      j.w.escapee_unmarked = true;
      ++res_.faults["unmarked_escapee"];
    }
    if (opt_.faults.escapees && chance(rng_, 0.02)) {
      j.w.suspect_ms = uniform(rng_, 1000, 30'000);
      ++res_.faults["unreadable_environment"];
    }
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
            ns.mem_total_bytes - ns.ram_reserve_bytes >= eff &&
            (!s.gpus || ns.vram_bytes >= s.vram_bytes.value_or(0)))
          fit.push_back(i);
      }
      if (!fit.empty())
        s.node = nodes_[fit[static_cast<std::size_t>(
                            uniform(rng_, 0, static_cast<std::int64_t>(fit.size()) - 1))]]
                     .name;
    }
    if (chance(rng_, 0.05))
      s.timeout_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(1, j.w.run_ms / 2));
    // A few fail rather than run again when their node is lost (the outcome
    // oracle permits `failed lost` for them alone).
    if (chance(rng_, 0.03))
      s.no_requeue = true;
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
  static const std::set<std::string> keys{"at_ms",          "priority",   "ram_bytes", "gpus",
                                          "node",           "checkpoint", "run_ms",    "exit",
                                          "peak_ram_bytes", "after",      "est_ms",    "cpus",
                                          "vram_bytes",     "owner",      "timeout_ms"};
  std::string line;
  std::int64_t last = 0;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    auto v = nlohmann::json::parse(line, nullptr, false);
    auto where = fmt::format("{} line {}", opt_.workload_file, number);
    if (v.is_discarded() || !v.is_object())
      throw std::runtime_error(where + ": not a JSON object");
    for (auto& [key, _] : v.items())
      if (!keys.count(key))
        throw std::runtime_error(fmt::format("{}: unknown field '{}' (the fields: {})", where, key,
                                             fmt::join(keys, ", ")));
    job_plan j;
    j.line = number;
    try {
      auto field = [&](const char* k) { return fmt::format("{}: {}", where, k); };
      j.at_ms = v.contains("at_ms")
                    ? static_cast<std::int64_t>(duration_field(v["at_ms"], field("at_ms")))
                    : last;
      last = j.at_ms;
      auto pr = v.value("priority", std::string("medium"));
      if (pr != "high" && pr != "medium" && pr != "low")
        throw std::runtime_error(field("priority") + ": high, medium or low");
      j.level = pr == "high" ? 0 : pr == "low" ? 2 : 1;
      j.spec.priority = pr;
      j.spec.cwd = "/";
      if (v.contains("ram_bytes"))
        j.spec.ram_bytes = size_field(v["ram_bytes"], field("ram_bytes"));
      if (v.contains("gpus"))
        j.spec.gpus = v["gpus"].get<std::uint64_t>();
      if (v.contains("cpus"))
        j.spec.cpus = v["cpus"].get<std::uint64_t>();
      if (v.contains("vram_bytes"))
        j.spec.vram_bytes = size_field(v["vram_bytes"], field("vram_bytes"));
      if (v.contains("est_ms"))
        j.spec.est_ms = duration_field(v["est_ms"], field("est_ms"));
      if (v.contains("timeout_ms"))
        j.spec.timeout_ms = duration_field(v["timeout_ms"], field("timeout_ms"));
      if (v.contains("owner"))
        j.owner = v["owner"].get<std::string>();
      if (v.contains("node"))
        j.spec.node = v["node"].get<std::string>();
      if (v.value("checkpoint", false)) {
        j.spec.preempt = std::string("checkpoint");
        j.w.checkpoints = true;
      }
      j.w.run_ms = v.contains("run_ms")
                       ? static_cast<std::int64_t>(duration_field(v["run_ms"], field("run_ms")))
                       : 1000;
      j.w.exit_code = v.value("exit", 0);
      if (v.contains("peak_ram_bytes"))
        j.w.rss_bytes = size_field(v["peak_ram_bytes"], field("peak_ram_bytes"));
      j.after = v.value("after", -1);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(fmt::format("{}: {}", where, e.what()));
    }
    if (j.after >= static_cast<int>(jobs_.size()))
      throw std::runtime_error(where + ": after: must name an earlier line (0-based)");
    jobs_.push_back(std::move(j));
  }
  // Submission order is time order; lines at the same instant keep the
  // file's order (a stable sort), and so does the queue (checker
  // serving_order). `after` names a line: it follows the sort.
  std::vector<int> order(jobs_.size());
  for (std::size_t k = 0; k < order.size(); ++k)
    order[k] = static_cast<int>(k);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return jobs_[static_cast<std::size_t>(a)].at_ms < jobs_[static_cast<std::size_t>(b)].at_ms;
  });
  std::vector<int> moved_to(jobs_.size());
  std::vector<job_plan> sorted;
  for (std::size_t k = 0; k < order.size(); ++k) {
    moved_to[static_cast<std::size_t>(order[k])] = static_cast<int>(k);
    sorted.push_back(std::move(jobs_[static_cast<std::size_t>(order[k])]));
  }
  jobs_ = std::move(sorted);
  for (std::size_t k = 0; k < jobs_.size(); ++k) {
    auto& j = jobs_[k];
    if (j.after >= 0) {
      j.after = moved_to[static_cast<std::size_t>(j.after)];
      if (j.after >= static_cast<int>(k))
        throw std::runtime_error(fmt::format("{} line {}: after: its line is submitted later",
                                             opt_.workload_file, j.line));
    }
    j.spec.argv = workload_argv(j.w, static_cast<std::uint64_t>(k));
    if (auto bad = policy::validate_spec(j.spec))
      throw std::runtime_error(
          fmt::format("{} line {}: {}", opt_.workload_file, j.line, bad->message));
  }
  opt_.jobs = static_cast<int>(jobs_.size());
  fault_end_ms_ = (jobs_.empty() ? 0 : jobs_.back().at_ms) + 2000;
}

/// The client's own id for workload line `k` (a UUID, so a retry after a lost
/// reply is the same submit: SPEC section 9).
std::string world::client_job_id(std::size_t k) const {
  // The line first: ids differ in their first bytes, as random UUIDs do
  // (the coordinator's maps by job id compare them; a shared prefix made
  // every comparison walk it). Ordered as before: by line.
  return fmt::format("{:08x}-0000-4000-8000-{:012x}", k, opt_.seed & 0xffffffffu);
}

void world::submit(std::size_t k, int tries) {
  auto& j = jobs_[k];
  auto spec = j.spec;
  // A retry sends the very request it repeats: the dependency the first try
  // named, even if it is acknowledged by now (the job id's spec must match).
  if (j.after >= 0 && tries == 0)
    dep_sent_[k] = job_ids_[static_cast<std::size_t>(j.after)];
  if (!dep_sent_[k].empty())
    spec.after = bus::string_list{dep_sent_[k]};
  if (tries == 0) {
    ++pending_submits_;
    first_sent_[k] = now();
  }
  auto cid = client_job_id(k);
  auto who = who_of(k);
  call(
      bus::submit_req{spec, cid},
      [this, k, tries, cid](std::optional<api_reply> r) {
        if (!r) {
          // The reply was lost with a crash: the job may or may not exist. The
          // same job id makes the retry safe (the checker exactly_once sees it).
          if (tries < 30) {
            trace(fmt::format("client: submit w{} lost; retrying with job id {}", k, cid));
            at(now() + 1000, [this, k, tries] { submit(k, tries + 1); });
            return;
          }
          ++res_.jobs_unknown;
          --pending_submits_;
          trace(fmt::format("client: submit w{} unknown", k));
          return;
        }
        if (auto* e = std::get_if<bus::error_info>(&r->body)) {
          // Checker exactly_once: a retry of the same submit is never a conflict.
          if (e->code == errc::job_conflict)
            violation("exactly_once",
                      fmt::format("the retried submit of job {} was refused: {}", cid, e->message),
                      {cid});
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
                    fmt::format("submit of job {} acknowledged before it was stored", id), {id});
        // Checker exactly_once: the reply names the client's own job.
        if (id != cid)
          violation("exactly_once", fmt::format("submit of job {} answered with job {}", cid, id),
                    {cid, id});
        if (job_ids_[k].empty() && !started_.count(id) && !is_terminal(plan_->job_states[id]))
          waiting_[static_cast<std::size_t>(jobs_[k].level)].insert(static_cast<int>(k));
        job_ids_[k] = id;
        index_of_[id] = static_cast<int>(k);
        acked_at_[id] = now();
        acked_ms_[k] = now();
        ++res_.jobs_acked;
        res_.submit_retries += tries;
        trace(fmt::format("client: w{} is job {}", k, id));
        if (auto c = jobs_[k].cancel_at_ms) {
          // Now and then another submitter tries first: refused, it changes
          // nothing (checker role_bypassed).
          if (k % 4 == 0)
            at(std::max(*c, now()), [this, k] { intrude(k); });
          at(std::max(*c, now()), [this, k] { cancel(k, 0); });
        }
        // Its owner moves it to the front of its level, or asks it to yield
        // (not in a study: there the workload alone says what happens).
        if (opt_.study)
          return;
        if (k % 7 == 3)
          at(now() + 1000, [this, k] {
            moved_.insert(k);
            bus::move_req m;
            m.job = job_ids_[k];
            m.placement = "front";
            call(
                m, [](auto) {}, who_of(k));
          });
        if (jobs_[k].w.checkpoints && k % 3 == 1)
          at(now() + 20'000, [this, k] {
            trace(fmt::format("client: preempt job {}", job_ids_[k]));
            call(
                bus::preempt_req{job_ids_[k]}, [](auto) {}, who_of(k));
          });
      },
      who);
}

void world::intrude(std::size_t k) {
  auto owner = who_of(k);
  auto& other = owner.name == std::string_view("alice") ? people[1] : people[0];
  auto id = job_ids_[k];
  call(
      bus::cancel_req{id, std::nullopt},
      [this, id, name = other.name](std::optional<api_reply> r) {
        // Checker role_bypassed: a submitter may cancel only its own jobs.
        if (r && std::holds_alternative<bus::cancel_rep>(r->body))
          violation("role_bypassed",
                    fmt::format("{} cancelled job {}, which is not theirs", name, id), {id});
      },
      other);
}

void world::cancel(std::size_t k, int tries) {
  auto id = job_ids_[k];
  // One operation id for the cancel and all its retries.
  auto op = fmt::format("{:08x}-0000-4000-9000-{:012x}", k, opt_.seed & 0xffffffffu);
  cancel_sent_.insert(k);
  call(
      bus::cancel_req{id, op},
      [this, k, tries](std::optional<api_reply> r) {
        // Checker cancel_lost: from its acknowledgement on, the job ends cancelled.
        if (r && std::holds_alternative<bus::cancel_rep>(r->body) &&
            cancel_acked_.try_emplace(job_ids_[k], now()).second)
          trace(fmt::format("client: cancel of job {} acknowledged", job_ids_[k]));
        bool again = !r || (std::holds_alternative<bus::error_info>(r->body) &&
                            (std::get<bus::error_info>(r->body).code == errc::internal ||
                             std::get<bus::error_info>(r->body).code == errc::unavailable));
        if (r)
          if (auto* e = std::get_if<bus::error_info>(&r->body);
              e && e->code == errc::operation_conflict)
            violation("exactly_once",
                      fmt::format("the retried cancel of job {} was refused: {}", job_ids_[k],
                                  e->message),
                      {job_ids_[k]});
        if (again && tries < 30)
          at(now() + 1000, [this, k, tries] { cancel(k, tries + 1); });
      },
      who_of(k));
}

} // namespace cq::sim::detail
