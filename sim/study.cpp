// cq-sim's scheduling studies (docs/adr/0018, "Studies"): a fleet from a
// file, a GPU cluster's workload drawn over weeks, the workload's owners, and
// the per-job report with its summary as JSON.
#include "policy/spec.hpp"
#include "world_impl.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numbers>
#include <sstream>

namespace cq::sim::detail {

namespace {

using json = nlohmann::json;
constexpr std::uint64_t gib = 1ull << 30;

[[noreturn]] void bad(const std::string& where, const std::string& why) {
  throw std::runtime_error(fmt::format("{}: {}", where, why));
}

/// "16G", "1.5 TiB", "512MiB" (binary units, as cq's sizes), or "2h",
/// "90m", "1h30m", "500ms", "1d" (parts summed); a bare number is bytes or
/// milliseconds.
std::uint64_t parse_units(std::string_view t, const std::string& what, bool duration) {
  double total = 0;
  std::size_t i = 0, parts = 0;
  auto blanks = [&] {
    while (i < t.size() && t[i] == ' ')
      ++i;
  };
  blanks();
  while (i < t.size()) {
    auto j = i;
    while (j < t.size() && (std::isdigit(static_cast<unsigned char>(t[j])) || t[j] == '.'))
      ++j;
    if (j == i || (!duration && parts > 0))
      break;
    double num = 0;
    try {
      num = std::stod(std::string(t.substr(i, j - i)));
    } catch (const std::exception&) {
      break;
    }
    i = j;
    blanks();
    auto k = i;
    while (k < t.size() && std::isalpha(static_cast<unsigned char>(t[k])))
      ++k;
    std::string unit(t.substr(i, k - i));
    for (auto& c : unit)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    i = k;
    blanks();
    double f = 0;
    if (duration) {
      static const std::map<std::string, double> units{{"", 1},    {"ms", 1},    {"s", 1e3},
                                                       {"m", 6e4}, {"h", 3.6e6}, {"d", 8.64e7}};
      if (auto u = units.find(unit); u != units.end())
        f = u->second;
    } else {
      static const std::map<std::string, double> units{
          {"", 1},         {"b", 1},       {"k", 0x1p10},   {"kb", 0x1p10}, {"kib", 0x1p10},
          {"m", 0x1p20},   {"mb", 0x1p20}, {"mib", 0x1p20}, {"g", 0x1p30},  {"gb", 0x1p30},
          {"gib", 0x1p30}, {"t", 0x1p40},  {"tb", 0x1p40},  {"tib", 0x1p40}};
      if (auto u = units.find(unit); u != units.end())
        f = u->second;
    }
    if (f == 0)
      bad(what, fmt::format("unknown unit '{}' in '{}'", unit, t));
    total += num * f;
    ++parts;
  }
  if (parts == 0 || i != t.size() || !(total >= 0) || total > 1.8e19)
    bad(what, fmt::format("'{}' is not a {}", t, duration ? "duration" : "size"));
  return static_cast<std::uint64_t>(total);
}

std::uint64_t unit_field(const json& v, const std::string& what, bool duration) {
  if (v.is_number_unsigned())
    return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  if (v.is_string())
    return parse_units(v.get<std::string>(), what, duration);
  bad(what, duration ? "a duration: milliseconds, or a string such as \"2h\" or \"90m\""
                     : "a size: bytes, or a string such as \"16G\"");
}

/// Uniform in (0, 1), from the engine alone.
double unit(std::mt19937_64& g) {
  return (static_cast<double>(g() >> 11) + 0.5) * 0x1.0p-53;
}

/// A standard normal draw (Box-Muller).
double normal(std::mt19937_64& g) {
  auto a = unit(g);
  auto b = unit(g);
  return std::sqrt(-2 * std::log(a)) * std::cos(2 * std::numbers::pi * b);
}

} // namespace

std::uint64_t size_field(const json& v, const std::string& what) {
  return unit_field(v, what, false);
}

std::uint64_t duration_field(const json& v, const std::string& what) {
  return unit_field(v, what, true);
}

std::vector<node_spec> parse_fleet(const std::string& all, const std::string& file) {
  std::vector<std::pair<json, std::string>> entries; // each with where it is
  auto first = all.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && all[first] == '[') {
    auto v = json::parse(all, nullptr, false);
    if (v.is_discarded() || !v.is_array())
      bad(file, "not a JSON array");
    for (std::size_t i = 0; i < v.size(); ++i)
      entries.emplace_back(v[i], fmt::format("{} entry {}", file, i + 1));
  } else {
    std::istringstream lines(all);
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos)
        continue;
      auto v = json::parse(line, nullptr, false);
      if (v.is_discarded())
        bad(fmt::format("{} line {}", file, number), "not JSON");
      entries.emplace_back(std::move(v), fmt::format("{} line {}", file, number));
    }
  }
  std::vector<node_spec> out;
  std::set<std::string> names;
  for (auto& [v, where] : entries) {
    if (!v.is_object())
      bad(where, "not a JSON object");
    static const std::set<std::string> keys{"name",    "count", "cpus", "ram",
                                            "reserve", "gpus",  "vram", "cgroups"};
    for (auto& [k, _] : v.items())
      if (!keys.count(k))
        bad(where, fmt::format("unknown field '{}' (the fields: name, count, cpus, ram, "
                               "reserve, gpus, vram, cgroups)",
                               k));
    auto field = [&](const char* k) { return fmt::format("{}: {}", where, k); };
    if (!v.contains("name") || !v["name"].is_string())
      bad(field("name"), "required, a string");
    auto name = v["name"].get<std::string>();
    std::uint64_t count = 1;
    if (v.contains("count")) {
      if (!v["count"].is_number_unsigned() || v["count"].get<std::uint64_t>() < 1 ||
          v["count"].get<std::uint64_t>() > 1024)
        bad(field("count"), "an integer from 1 to 1024");
      count = v["count"].get<std::uint64_t>();
    }
    node_spec s;
    if (!v.contains("cpus") || !v["cpus"].is_number_unsigned() ||
        v["cpus"].get<std::uint64_t>() < 1)
      bad(field("cpus"), "required, an integer of at least 1");
    s.cpus = v["cpus"].get<std::uint64_t>();
    if (!v.contains("ram"))
      bad(field("ram"), "required, a size such as \"256G\"");
    s.mem_total_bytes = size_field(v["ram"], field("ram"));
    s.ram_reserve_bytes = v.contains("reserve") ? size_field(v["reserve"], field("reserve")) : gib;
    if (s.mem_total_bytes <= s.ram_reserve_bytes)
      bad(field("ram"), "must be more than the reserve (1 GiB unless \"reserve\" says)");
    if (v.contains("gpus")) {
      auto& g = v["gpus"];
      if (g.is_number_unsigned()) {
        s.gpus = static_cast<int>(std::min<std::uint64_t>(g.get<std::uint64_t>(), 64));
        if (s.gpus > 0 && !v.contains("vram"))
          bad(field("vram"), "required with a number of GPUs: each GPU's VRAM, such as \"80G\"");
        if (v.contains("vram"))
          s.vram_bytes = size_field(v["vram"], field("vram"));
      } else if (g.is_array()) {
        if (v.contains("vram"))
          bad(field("vram"), "not with a list of GPUs (each names its own)");
        for (std::size_t i = 0; i < g.size(); ++i) {
          auto what = fmt::format("{}: gpus[{}]", where, i);
          auto& lane = g[i];
          if (lane.is_object() && lane.contains("vram") && lane.size() == 1)
            s.lane_vram_bytes.push_back(size_field(lane["vram"], what + ".vram"));
          else if (lane.is_string() || lane.is_number())
            s.lane_vram_bytes.push_back(size_field(lane, what));
          else
            bad(what, "a GPU: {\"vram\": SIZE} or its VRAM as a size");
        }
        s.gpus = static_cast<int>(s.lane_vram_bytes.size());
        s.vram_bytes =
            s.gpus ? *std::max_element(s.lane_vram_bytes.begin(), s.lane_vram_bytes.end()) : 0;
        if (std::all_of(s.lane_vram_bytes.begin(), s.lane_vram_bytes.end(),
                        [&](std::uint64_t b) { return b == s.vram_bytes; }))
          s.lane_vram_bytes.clear(); // all alike
      } else {
        bad(field("gpus"), "a number of GPUs (with \"vram\"), or a list of GPUs");
      }
      if (s.gpus > 0 && s.vram_of(0) == 0)
        bad(field("vram"), "a GPU has no VRAM");
    }
    if (v.contains("cgroups")) {
      if (!v["cgroups"].is_boolean())
        bad(field("cgroups"), "true or false");
      s.cgroups = v["cgroups"].get<bool>();
    } else {
      s.cgroups = true;
    }
    for (std::uint64_t c = 0; c < count; ++c) {
      auto n = s;
      n.name = count > 1 ? fmt::format("{}-{}", name, c) : name;
      if (!policy::valid_name(n.name))
        bad(field("name"),
            fmt::format("'{}' is not a node name ([A-Za-z0-9._-], at most 64)", n.name));
      if (!names.insert(n.name).second)
        bad(field("name"), fmt::format("node '{}' twice", n.name));
      out.push_back(std::move(n));
    }
  }
  if (out.empty())
    bad(file, "no nodes");
  if (out.size() > 1024)
    bad(file, fmt::format("{} nodes; at most 1024", out.size()));
  return out;
}

person world::who_of(std::size_t k) const {
  auto& o = jobs_[k].owner;
  if (o.empty())
    return people[k % std::size(people)];
  for (auto& p : people)
    if (o == p.name)
      return p;
  auto it = owner_tokens_.find(o);
  return person{it->first.c_str(), "submitter", it->second.c_str()};
}

void world::register_owners() {
  for (auto& j : jobs_) {
    if (j.owner.empty() || owner_tokens_.count(j.owner) ||
        std::any_of(std::begin(people), std::end(people),
                    [&](const person& p) { return j.owner == p.name; }))
      continue;
    if (j.owner == owner_person.name || !policy::valid_name(j.owner))
      throw std::runtime_error(fmt::format("owner '{}': not an identity name for a submitter "
                                           "([A-Za-z0-9._-], at most 64; not \"owner\")",
                                           j.owner));
    auto token = j.owner + "-token";
    coord::add_token(*db_, j.owner, "submitter", token, 1'700'000'000'000);
    owner_tokens_.emplace(j.owner, std::move(token));
  }
}

void world::generate_study() {
  int max_gpus = 0;
  for (auto& n : nodes_)
    max_gpus = std::max(max_gpus, n.model->spec().gpus);
  // What share of jobs asks for how many GPUs (a GPU cluster's mix).
  static const std::pair<int, int> gpu_mix[] = {{0, 10}, {1, 55}, {2, 15}, {4, 12}, {8, 8}};
  double cpu_work = 0;
  std::vector<std::size_t> fit;
  for (int k = 0; k < opt_.jobs; ++k) {
    job_plan j;
    auto& s = j.spec;
    int gpus = 0;
    if (max_gpus > 0) {
      auto p = uniform(rng_, 0, 99);
      for (auto [g, share] : gpu_mix) {
        if (p < share) {
          gpus = g;
          break;
        }
        p -= share;
      }
      while (gpus > max_gpus)
        gpus /= 2;
    }
    // Drawn within one node that can take it, so that every job fits somewhere.
    fit.clear();
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].model->spec().gpus >= gpus)
        fit.push_back(i);
    auto& ns = nodes_[fit[static_cast<std::size_t>(
                          uniform(rng_, 0, static_cast<std::int64_t>(fit.size()) - 1))]]
                   .model->spec();
    auto p = uniform(rng_, 0, 99);
    j.level = p < 10 ? 0 : p < 85 ? 1 : 2;
    s.priority = std::string(j.level == 0 ? "high" : j.level == 1 ? "medium" : "low");
    s.cwd = "/";
    // A GPU job asks for 30-100% of its GPUs' share of the node's RAM and
    // CPUs (so that the GPUs, not the RAM, are what a node runs out of); a
    // CPU job for 2-64 GiB (at most half the node) and 1-8 CPUs.
    auto alloc = ns.mem_total_bytes - ns.ram_reserve_bytes;
    if (gpus) {
      auto share =
          static_cast<double>(gpus) / ns.gpus * static_cast<double>(uniform(rng_, 30, 100)) / 100;
      s.ram_bytes = std::max<std::uint64_t>(
          gib, static_cast<std::uint64_t>(static_cast<double>(alloc) * share) / gib * gib);
      s.cpus = std::max<std::uint64_t>(
          1, static_cast<std::uint64_t>(static_cast<double>(ns.cpus) * share));
    } else {
      s.ram_bytes = std::min(static_cast<std::uint64_t>(uniform(rng_, 2, 64)) * gib, alloc / 2);
      s.cpus = std::min<std::uint64_t>(ns.cpus, static_cast<std::uint64_t>(uniform(rng_, 1, 8)));
    }
    if (gpus) {
      s.gpus = static_cast<std::uint64_t>(gpus);
      auto smallest = ns.vram_bytes;
      for (int l = 0; l < ns.gpus; ++l)
        smallest = std::min(smallest, ns.vram_of(l));
      if (smallest >= 8 * gib && chance(rng_, 0.5))
        s.vram_bytes = static_cast<std::uint64_t>(
                           uniform(rng_, 8, static_cast<std::int64_t>(smallest / gib))) *
                       gib;
    }
    // Run time: log-normal, median 40 minutes, from a minute to a week.
    auto run = 2.4e6 * std::exp(1.5 * normal(rng_));
    j.w.run_ms = static_cast<std::int64_t>(std::clamp(run, 6e4, 6.048e8));
    // Most people give an estimate, rounded up to a quarter hour and often
    // generous; some set a time limit, a few of them too short.
    if (chance(rng_, 0.7)) {
      auto est = static_cast<double>(j.w.run_ms) * std::exp(0.3 + 0.6 * normal(rng_));
      s.est_ms = static_cast<std::uint64_t>(std::ceil(est / 9e5) * 9e5);
    }
    if (chance(rng_, 0.15))
      s.timeout_ms = s.est_ms ? *s.est_ms / 2 * 3
                              : static_cast<std::uint64_t>(j.w.run_ms) / 100 *
                                    static_cast<std::uint64_t>(uniform(rng_, 50, 300));
    j.w.exit_code = chance(rng_, 0.07) ? 1 : 0;
    if (chance(rng_, 0.1)) {
      s.preempt = std::string("checkpoint");
      j.w.checkpoints = true;
    }
    // Twelve people, the first ones submitting most.
    double u = unit(rng_) * 3.1032; // sum of 1/i for i = 1..12
    int who = 1;
    for (double acc = 1; acc < u && who < 12; acc += 1.0 / ++who) {
    }
    j.owner = fmt::format("user{:02}", who);
    s.argv = workload_argv(j.w, static_cast<std::uint64_t>(k));
    cpu_work += static_cast<double>(*s.cpus) * static_cast<double>(j.w.run_ms);
    jobs_.push_back(std::move(j));
  }
  // Arrivals over a span that offers the GPUs (or the CPUs) 70% of what
  // they can do, on every class of node: the work of jobs needing g GPUs or
  // more against the lanes of nodes having g or more (else the few widest
  // nodes would get more than they can ever run, and the queue grows
  // without bound); a fifth of the submissions are sweeps of 2 to 20 jobs
  // at one instant.
  constexpr double load = 0.7;
  auto span = cpu_work / (static_cast<double>(cpus_total_) * load);
  for (int g = 1; g <= max_gpus; ++g) {
    double work = 0, lanes = 0;
    for (auto& j : jobs_)
      if (static_cast<int>(j.spec.gpus.value_or(0)) >= g)
        work += static_cast<double>(*j.spec.gpus) * static_cast<double>(j.w.run_ms);
    for (auto& n : nodes_)
      if (n.model->spec().gpus >= g)
        lanes += n.model->spec().gpus;
    if (lanes > 0)
      span = std::max(span, work / (lanes * load));
  }
  auto span_ms = std::max<std::int64_t>(3'600'000, static_cast<std::int64_t>(span));
  for (std::size_t k = 0; k < jobs_.size();) {
    auto t = 60'000 + uniform(rng_, 0, span_ms);
    auto n = chance(rng_, 0.2) ? uniform(rng_, 2, 20) : 1;
    for (std::int64_t m = 0; m < n && k < jobs_.size(); ++m)
      jobs_[k++].at_ms = t;
  }
  std::stable_sort(jobs_.begin(), jobs_.end(), [](auto& a, auto& b) { return a.at_ms < b.at_ms; });
  fault_end_ms_ = (jobs_.empty() ? 0 : jobs_.back().at_ms) + 2000;
}

namespace {

/// Mean, p50 and p95 (nearest rank) of `v`, in ms; nulls when empty.
json stats(std::vector<std::int64_t> v) {
  json out;
  if (v.empty()) {
    out["mean"] = out["p50"] = out["p95"] = nullptr;
    return out;
  }
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (auto x : v)
    sum += static_cast<double>(x);
  auto rank = [&](double p) {
    auto r = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
    return v[std::clamp<std::size_t>(r, 1, v.size()) - 1];
  };
  out["mean"] = std::round(sum / static_cast<double>(v.size()));
  out["p50"] = rank(0.5);
  out["p95"] = rank(0.95);
  return out;
}

} // namespace

std::string world::report_json(double wall_s) const {
  std::vector<std::int64_t> waits, completions;
  std::int64_t first_submit = INT64_MAX, last_end = INT64_MIN;
  std::string rows;
  std::map<std::string, int> outcomes;
  for (std::size_t k = 0; k < jobs_.size(); ++k) {
    auto& jp = jobs_[k];
    auto id = job_ids_[k].empty() ? client_job_id(k) : job_ids_[k];
    json r;
    r["index"] = k;
    if (jp.line)
      r["line"] = jp.line;
    r["id"] = id;
    r["owner"] = who_of(k).name;
    r["priority"] = jp.spec.priority.value_or("medium");
    r["gpus"] = jp.spec.gpus.value_or(0);
    r["cpus"] = jp.spec.cpus.value_or(0);
    auto submit = first_sent_[k];
    r["submit_ms"] = submit >= 0 ? json(submit) : json(nullptr);
    if (submit >= 0)
      first_submit = std::min(first_submit, submit);
    r["start_ms"] = r["end_ms"] = r["node"] = r["wait_ms"] = r["completion_ms"] = nullptr;
    if (auto s = first_start_.find(id); s != first_start_.end() && submit >= 0) {
      r["start_ms"] = s->second.first;
      r["wait_ms"] = s->second.first - submit;
      waits.push_back(s->second.first - submit);
    }
    if (auto a = starts_.find(id); a != starts_.end() && !a->second.empty())
      r["node"] = nodes_[a->second.back().first].name; // where it ran last
    r["state"] = "unknown";
    if (auto p = plan_->job_states.find(id); p != plan_->job_states.end())
      r["state"] = std::string(to_string(p->second));
    if (auto e = committed_end_.find(id); e != committed_end_.end() && submit >= 0) {
      r["end_ms"] = e->second.at_ms;
      r["completion_ms"] = e->second.at_ms - submit;
      r["state"] = std::string(to_string(e->second.state));
      if (e->second.reason != bus::reason::none)
        r["reason"] = fmt::format("{}", e->second.reason);
      completions.push_back(e->second.at_ms - submit);
      last_end = std::max(last_end, e->second.at_ms);
    }
    ++outcomes[r["state"].get<std::string>()];
    rows += (rows.empty() ? "\n  " : ",\n  ") + r.dump();
  }
  json summary;
  summary["jobs"] = jobs_.size();
  summary["started"] = waits.size();
  summary["ended"] = completions.size();
  summary["outcomes"] = outcomes;
  summary["wait_ms"] = stats(waits);
  summary["completion_ms"] = stats(completions);
  auto makespan =
      last_end >= first_submit && first_submit != INT64_MAX ? last_end - first_submit : 0;
  summary["makespan_ms"] = makespan;
  // Held by live allocations over the makespan (nothing is held outside it):
  // lanes, CPUs and RAM caps, as fractions of the fleet's.
  auto over = [&](double area) {
    return makespan > 0 ? area / static_cast<double>(makespan) : 0.0;
  };
  summary["gpu_utilization"] = over(gpu_area_);
  summary["cpu_utilization"] = over(cpu_area_);
  summary["ram_utilization"] = over(ram_area_);
  json run;
  run["seed"] = opt_.seed;
  run["nodes"] = nodes_.size();
  run["gpus"] = lanes_total_;
  run["study"] = opt_.study;
  run["heartbeat_ms"] = heartbeat_ms_;
  run["simulated_ms"] = now();
  run["wall_s"] = std::round(wall_s * 1000) / 1000;
  run["simulated_hours_per_wall_second"] =
      wall_s > 0 ? std::round(static_cast<double>(now()) / 3.6e6 / wall_s * 10) / 10 : 0.0;
  run["ok"] = res_.ok;
  if (!res_.ok)
    run["violation"] = res_.violation;
  return fmt::format("{{\n \"run\": {},\n \"summary\": {},\n \"jobs\": [{}\n ]\n}}\n", run.dump(),
                     summary.dump(), rows);
}

} // namespace cq::sim::detail
