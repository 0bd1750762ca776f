#pragma once
// The job listing's messages (ls): pages of jobs, or of the rows cq ls draws
// (docs/adr/0030). Part of the wire protocol (protocol.hpp includes it).

#include "cq/bus/schema.hpp"

#include <optional>
#include <string>
#include <vector>

namespace cq::bus {

/// One page of the job listing, in submission order. A page holds at most
/// `limit` jobs and at most limits::page_bytes of them; `next_cursor` in the
/// reply continues the listing where the page ended.
struct ls_req {
  static constexpr std::string_view op = "ls";
  bool all = false;                    ///< include terminal jobs
  std::optional<std::uint64_t> limit;  ///< at most this many jobs in this page
  std::optional<std::uint64_t> cursor; ///< continue after this position (a reply's next_cursor)
  /// Also why the first this many queued jobs in serving order wait (at
  /// most ls_reasons_max; first page only): cq ls's REASON column.
  std::optional<std::uint64_t> reasons;
  /// Rows as cq ls shows them (ls_rep::rows) instead of jobs: in serving
  /// order (running by start, queued by level and position, finished newest
  /// first), an array folded into one row where its first task would be.
  /// `cursor` and `limit` then count rows.
  std::optional<bool> rows;
  std::optional<bool> expand; ///< with rows: every array task on its own row
  /// Filters, of rows or jobs alike (a coordinator before 2026-12 applies
  /// them to rows only): only jobs in these states (job_state names), whose
  /// name matches this glob, of this identity or the caller, on (or last
  /// on) this node. `total` then counts the jobs that pass.
  std::optional<string_list> states;
  std::optional<std::string> name_pattern;
  std::optional<std::string> owner;
  std::optional<bool> mine;
  std::optional<std::string> node;
  /// Without rows: only the tasks of the array this names, as a person typed
  /// it (bus::array_named: its id, a prefix of it, or its name); none when
  /// it names no array, invalid_argument when it names several.
  std::optional<std::string> array;
};
template <class F>
void fields(F&& f, ls_req& x) {
  f("all", x.all), f("limit", x.limit), f("cursor", x.cursor), f("reasons", x.reasons),
      f("rows", x.rows), f("expand", x.expand), f("states", x.states),
      f("name_pattern", x.name_pattern), f("owner", x.owner), f("mine", x.mine), f("node", x.node),
      f("array", x.array);
}

/// One row of cq ls for a whole array: its tasks that the listing's filters
/// keep, counted by state.
struct array_row {
  std::string array; ///< the array's id
  std::string name;  ///< its tasks' name without the -INDEX suffix
  std::uint64_t tasks = 0;
  std::uint64_t running = 0; ///< starting, running or stopping
  std::uint64_t queued = 0;  ///< queued and not on hold
  std::uint64_t held = 0;    ///< queued, on hold (cq hold)
  std::uint64_t succeeded = 0;
  std::uint64_t failed = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t limit = 0; ///< its tasks' --array-limit (0 = none)
  string_list nodes; ///< its live tasks' nodes; once all ended, theirs (at most 2: more counted)
  std::uint64_t node_count = 0;
  std::int64_t submitted_ms = 0; ///< its earliest task's
  std::int64_t started_ms = 0;   ///< its earliest start (0 = none yet)
  std::int64_t finished_ms = 0;  ///< its latest end
};
template <class F>
void fields(F&& f, array_row& x) {
  f("array", x.array), f("name", x.name), f("tasks", x.tasks), f("running", x.running),
      f("queued", x.queued), f("held", x.held), f("succeeded", x.succeeded), f("failed", x.failed),
      f("cancelled", x.cancelled), f("limit", x.limit), f("nodes", x.nodes),
      f("node_count", x.node_count), f("submitted_ms", x.submitted_ms),
      f("started_ms", x.started_ms), f("finished_ms", x.finished_ms);
}

/// A job as a rows listing draws it: job_info's fields that cq ls shows,
/// each absent where it is its default, so a row costs little on the wire.
struct job_brief {
  std::string id;
  std::string name;
  std::string owner;
  job_state state = job_state::queued;
  std::optional<bus::reason> reason;
  std::optional<std::string> node;
  std::optional<std::string> priority;   ///< absent: medium
  std::optional<std::uint64_t> position; ///< queued: 1-based slot within its level
  std::optional<bool> on_hold;
  std::optional<string_list> after; ///< only the dependencies it still waits for
  std::optional<std::string> pinned_node;
  std::optional<string_list> lanes;
  std::optional<std::uint64_t> attempt;
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> signal;
  std::int64_t submitted_ms = 0;
  std::optional<std::int64_t> started_ms;
  std::optional<std::int64_t> finished_ms;
  std::optional<std::uint64_t> timeout_ms;          ///< only with reason timeout
  std::optional<std::uint64_t> effective_ram_bytes; ///< only with reason oom
};
template <class F>
void fields(F&& f, job_brief& x) {
  f("id", x.id), f("name", x.name), f("owner", x.owner), f("state", x.state), f("reason", x.reason),
      f("node", x.node), f("priority", x.priority), f("position", x.position),
      f("on_hold", x.on_hold), f("after", x.after), f("pinned_node", x.pinned_node),
      f("lanes", x.lanes), f("attempt", x.attempt), f("exit_code", x.exit_code),
      f("signal", x.signal), f("submitted_ms", x.submitted_ms), f("started_ms", x.started_ms),
      f("finished_ms", x.finished_ms), f("timeout_ms", x.timeout_ms),
      f("effective_ram_bytes", x.effective_ram_bytes);
}

/// One row of a rows listing: a job or a folded array.
struct ls_row {
  std::optional<job_brief> job;
  std::optional<array_row> array;
};
template <class F>
void fields(F&& f, ls_row& x) {
  f("job", x.job), f("array", x.array);
}

/// The most queued jobs one listing explains (each costs a look at every node).
inline constexpr std::uint64_t ls_reasons_max = 50;

/// Why a queued job waits, as the scheduler says it (cq show's waiting lines).
struct job_reasons {
  std::string job;
  string_list waiting; ///< "NODE: why", one line per node; empty: it fits now
};
template <class F>
void fields(F&& f, job_reasons& x) {
  f("job", x.job), f("waiting", x.waiting);
}

struct ls_rep {
  std::vector<job_info> jobs;         ///< matching jobs in submission order, from the cursor on
  std::optional<std::uint64_t> total; ///< how many jobs match in all (every page)
  std::optional<std::uint64_t> next_cursor; ///< more jobs follow: ask again with this cursor
  /// With ls_req::reasons: the queued jobs explained, in serving order (jobs
  /// on hold or waiting for a dependency are not: their job_info says why).
  std::optional<std::vector<job_reasons>> reasons;
  /// How many leading characters tell each listed job's id (and its array's)
  /// apart from every job's the coordinator has, listed or not: what a
  /// person can type back (at least 8).
  std::optional<std::uint64_t> id_prefix;
  /// With ls_req::rows: this page's rows (`jobs` is empty) and how many rows
  /// the listing has in all (`total` still counts jobs).
  std::optional<std::vector<ls_row>> rows;
  std::optional<std::uint64_t> total_rows;
};
template <class F>
void fields(F&& f, ls_rep& x) {
  f("jobs", x.jobs), f("total", x.total), f("next_cursor", x.next_cursor), f("reasons", x.reasons),
      f("id_prefix", x.id_prefix), f("rows", x.rows), f("total_rows", x.total_rows);
}

} // namespace cq::bus
