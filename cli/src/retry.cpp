// cq retry: a finished job's spec submitted again, and the refusal every
// command that takes one job gives an array's name.
#include "commands.hpp"
#include "cq/bus/format.hpp"
#include "cq/cli/escape.hpp"

#include <fmt/format.h>

namespace cq::cli {

std::optional<bus::error_info> one_task_please(session& s, const std::string& ref,
                                               std::string_view does) {
  auto tasks = array_tasks(s, ref);
  if (!tasks || tasks->empty())
    return std::nullopt;
  auto& first = tasks->front();
  return bus::error_info{errc::invalid_argument,
                         fmt::format("'{}' is an array of {} task{}, and {}: name a task ({}, "
                                     "...) or give its id",
                                     escape_control(ref), tasks->size(),
                                     tasks->size() == 1 ? "" : "s", does,
                                     first.name.empty() ? first.id : first.name)};
}

int run_retry(const std::string& job, bool json, bool quiet) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  bus::show_req req{job};
  req.env = true;
  auto rep = s->call<bus::show_rep>(req);
  if (!rep && rep.error().code == errc::not_found)
    if (auto e = one_task_please(*s, job, "cq retry submits one finished job again"))
      return report_error(*e, json);
  if (!rep)
    return report_error(rep.error(), json);
  const auto& j = rep->job;
  if (!bus::is_terminal(j.state))
    return report_error(
        {errc::invalid_state, fmt::format("job {} is {}; cq retry submits a finished job again "
                                          "(cq cancel it first to start over)",
                                          j.id, j.state)},
        json);
  // The finished job's spec, through the same checks as a typed submit, with
  // its own environment (a coordinator too old to give it back: this shell's).
  submit_options o;
  if (rep->env) {
    o.env_clear = true;
    for (const auto& [k, v] : *rep->env)
      if (!k.starts_with("CQ_ARRAY_")) // an array task's, given again by its array only
        o.env.push_back(k + "=" + v);
  }
  o.name = j.name.empty() ? std::nullopt : std::optional<std::string>(j.name);
  o.argv = j.argv;
  o.cwd = j.cwd;
  if (j.pinned_node)
    o.node = *j.pinned_node;
  o.priority = j.priority;
  auto num = [](auto v) { return std::optional<std::string>(std::to_string(v)); };
  auto ms = [](auto v) { return std::optional<std::string>(fmt::format("{}ms", v)); };
  if (j.ram_bytes)
    o.ram = num(*j.ram_bytes);
  if (j.gpus)
    o.gpus = num(j.gpus);
  if (j.vram_bytes)
    o.vram = num(*j.vram_bytes);
  o.cpus = num(j.cpus);
  if (j.est_ms)
    o.est = ms(*j.est_ms);
  if (j.timeout_ms)
    o.timeout = ms(*j.timeout_ms);
  o.profile = j.profile;
  if (j.ram_floor_bytes)
    o.ram_floor = num(j.ram_floor_bytes);
  if (j.ram_start_min_bytes)
    o.ram_start_min = num(j.ram_start_min_bytes);
  o.preempt = j.preempt;
  if (j.lease_ms)
    o.lease = ms(j.lease_ms);
  o.lost_after = j.lost_after_ms ? ms(j.lost_after_ms) : std::optional<std::string>("never");
  o.no_requeue = j.no_requeue;
  if (j.retry_oom)
    o.retry_oom = num(j.retry_oom);
  if (!j.output.empty())
    o.output = j.output;
  o.json = json;
  o.quiet = quiet;
  return run_submit(o);
}

} // namespace cq::cli
