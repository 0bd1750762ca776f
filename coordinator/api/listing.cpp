// The rows listing (ls_req::rows): cq ls's page as it shows it, built here so
// that the CLI asks only for the rows it draws. The order is the CLI's
// serving order: live jobs that hold an allocation by start time, then queued
// jobs by level and position, then finished jobs newest first; ties keep
// submission order. An array folds into one row where its first task falls.
#include "api/state.hpp"
#include "cq/bus/array_row.hpp"
#include "cq/bus/job_filter.hpp"

namespace cq::coord::api_impl {

namespace {

/// Whether job `j` passes the listing's filters.
bool keeps(const bus::job_info& j, const bus::ls_req& q, const bus::listing_filter& f) {
  if (!q.all && is_terminal(j.state))
    return false;
  return f(j);
}

/// What a rows listing carries of job `j` (defaults left out), written into
/// `b` (default-constructed, where the page keeps it).
void fill_brief(bus::job_brief& b, const api_state& st, const bus::job_info& j,
                std::uint64_t position) {
  b.id = j.id;
  b.name = j.name;
  b.owner = j.owner;
  b.state = j.state;
  if (j.reason != bus::reason::none)
    b.reason = j.reason;
  if (!j.node.empty())
    b.node = j.node;
  if (j.priority != "medium")
    b.priority = j.priority;
  if (position)
    b.position = position;
  if (j.on_hold)
    b.on_hold = true;
  if (j.state == job_state::queued)
    for (const auto& d : j.after) {
      auto dj = st.jobs.find(d);
      if (dj != st.jobs.end() && dj->second.state != job_state::succeeded) {
        if (!b.after)
          b.after.emplace();
        b.after->push_back(d);
      }
    }
  b.pinned_node = j.pinned_node;
  if (!j.lanes.empty())
    b.lanes = j.lanes;
  if (j.attempt)
    b.attempt = j.attempt;
  b.exit_code = j.exit_code;
  b.signal = j.signal;
  b.submitted_ms = j.submitted_ms;
  if (j.started_ms)
    b.started_ms = j.started_ms;
  if (j.finished_ms)
    b.finished_ms = j.finished_ms;
  // The cap and the timeout only where cq ls names them ("oom (cap 2 GiB)",
  // "timeout (1h)"): most rows are queued, and these were a fifth of one.
  if (j.reason == bus::reason::timeout)
    b.timeout_ms = j.timeout_ms;
  if (j.reason == bus::reason::oom && j.effective_ram_bytes)
    b.effective_ram_bytes = j.effective_ram_bytes;
}

} // namespace

bus::ls_rep ls_rows(api_ptr self, const bus::ls_req& q, const bus::listing_filter& filter) {
  auto& st = self->state;
  bool fold = !q.expand.value_or(false);
  // One pass over the read model (in its own order: no lookup per job): the
  // kept jobs of each group and the arrays' tasks, each with its seq.
  struct entry {
    std::int64_t at;
    std::uint64_t seq;
    const bus::job_info* job;
  };
  std::vector<entry> live, done;
  std::unordered_map<std::string, std::vector<std::pair<std::uint64_t, const bus::job_info*>>>
      tasks;
  std::uint64_t singles = 0, kept_queued = 0;
  auto consider = [&](const job_entry& j) {
    if (!keeps(j, q, filter))
      return;
    if (fold && !j.array.empty())
      tasks[j.array].emplace_back(j.seq, &j);
    else
      ++singles;
    if (j.state == job_state::queued)
      ++kept_queued;
    else if (is_terminal(j.state))
      done.push_back({-j.finished_ms, j.seq, &j});
    else
      live.push_back({j.started_ms, j.seq, &j});
  };
  // Without finished jobs, only the serving order's (the live ones) are
  // looked at: the finished jobs of the history window may be far more.
  if (q.all)
    for (auto& [id, j] : st.jobs)
      consider(j);
  else
    for (auto& [key, node] : st.order)
      consider(node->second);
  // Each array's row counts its tasks in submission order (the first names it).
  std::unordered_map<std::string, bus::array_row> arrays;
  for (auto& [array, members] : tasks) {
    std::sort(members.begin(), members.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    bus::task_nodes nodes;
    auto& a = arrays[array];
    for (auto& [s, t] : members)
      bus::count_task(a, *t, nodes);
    bus::finish_tasks(a, nodes);
  }
  auto by_key = [](const entry& a, const entry& b) {
    return std::tie(a.at, a.seq) < std::tie(b.at, b.seq);
  };
  std::sort(live.begin(), live.end(), by_key);
  std::sort(done.begin(), done.end(), by_key);
  bus::ls_rep out;
  out.rows.emplace();
  out.total = live.size() + kept_queued + done.size();
  out.total_rows = singles + arrays.size();
  auto from = q.cursor.value_or(0);
  auto limit = q.limit.value_or(UINT64_MAX);
  // Room for the page's rows at once (page_bytes bounds a page in any case).
  out.rows->reserve(std::min<std::uint64_t>({limit, *out.total_rows, 16384}));
  std::uint64_t row = 0;
  std::size_t bytes = 64;
  std::set<std::string> drawn; // arrays with a row already
  // Adds the row of `j` (or of its array); false once the page is full.
  auto add = [&](const bus::job_info& j, std::uint64_t position) {
    bool folded = fold && !j.array.empty();
    if (folded && !drawn.insert(j.array).second)
      return true;
    if (row++ < from)
      return true;
    if (out.rows->size() >= limit) {
      out.next_cursor = row - 1;
      return false;
    }
    // Built where the page keeps it; taken back if it does not fit.
    auto& r = out.rows->emplace_back();
    if (folded)
      r.array = arrays.at(j.array);
    else
      fill_brief(r.job.emplace(), st, j, position);
    auto size = bus::wire_size_bound(r);
    if (out.rows->size() > 1 && bytes + size > bus::limits::page_bytes) {
      out.rows->pop_back();
      out.next_cursor = row - 1;
      return false;
    }
    bytes += size;
    return true;
  };
  bool more = true;
  for (auto& e : live)
    if (!(more = add(*e.job, 0)))
      break;
  if (more) {
    std::array<std::uint64_t, 3> pos{};
    for (auto& [k, node] : st.order) {
      const auto& j = node->second;
      if (j.state != job_state::queued)
        continue;
      auto p = ++pos[std::get<0>(k)];
      if (keeps(j, q, filter) && !(more = add(j, p)))
        break;
    }
  }
  if (more)
    for (auto& e : done)
      if (!add(*e.job, 0))
        break;
  out.id_prefix = page_prefix(st, out.rows->size(), [&](auto&& each) {
    for (const auto& r : *out.rows)
      each(r.job ? r.job->id : r.array->array, !r.job);
  });
  return out;
}

} // namespace cq::coord::api_impl
