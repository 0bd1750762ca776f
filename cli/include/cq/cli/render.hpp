#pragma once
// Human views of jobs: `cq ls` and `cq show`. Pure functions of the replies,
// the clock and the terminal (width, colour), so golden tests pin them down
// (tests/unit/cli_render_test.cpp, tests/fixtures/golden/).

#include "cq/bus/protocol.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cq::cli {

/// How a view is drawn: `width` columns (0 = unlimited, as for a pipe) and
/// ANSI colours for states.
struct render_style {
  std::size_t width = 0;
  bool colour = false;
};

/// The shortest id prefix that tells every one of `ids` apart, at least
/// `min` characters (at most the longest id).
std::size_t unique_prefix_length(const std::vector<std::string>& ids, std::size_t min = 8);

/// `jobs` in the order the queue serves them: running (and starting,
/// stopping) by start, then queued by level and position, then finished jobs,
/// the latest first.
void sort_serving_order(std::vector<bus::job_info>& jobs);

/// Why queued jobs wait, for `cq ls`: job id -> wait_words of the
/// scheduler's lines.
using wait_map = std::map<std::string, std::string>;

/// The `cq ls` table. `jobs` is drawn in the order given; an array's tasks
/// fold into one row (counts by state) unless `expand`. `waits` says why
/// queued jobs wait (the REASON column; without it, their place).
/// `id_prefix`: the shortest prefix the coordinator says tells each id apart
/// from every job's (ls_rep::id_prefix); ids are cut at it or where they
/// differ among those listed, whichever is longer.
std::string render_ls(const std::vector<bus::job_info>& jobs, std::int64_t now_ms,
                      const render_style& style, bool expand = false, const wait_map& waits = {},
                      std::size_t id_prefix = 8);

/// The `cq ls` table of one page of the coordinator's rows listing
/// (ls_req::rows), drawn in the order given; as render_ls otherwise, but for
/// `id_prefix`: the coordinator's (ls_rep::id_prefix), or 0 where it gave
/// none. It tells every job's id apart from every other job's, so a page of
/// job rows is cut at it (at least 8) without comparing the ids here; with
/// an array's row on the page (its id is not covered), or without it, the
/// ids are compared as render_ls does.
std::string render_ls_rows(const std::vector<bus::ls_row>& page, std::int64_t now_ms,
                           const render_style& style, const wait_map& waits = {},
                           std::size_t id_prefix = 0);
/// The same for rows held elsewhere (each page of a listing as it came).
std::string render_ls_rows(const std::vector<const bus::ls_row*>& page, std::int64_t now_ms,
                           const render_style& style, const wait_map& waits = {},
                           std::size_t id_prefix = 0);

/// The scheduler's waiting lines for one job ("NODE: why", one per node) in a
/// few words: the one node's why; the why every node gives, "(every node)";
/// else the first node's line and how many more. "" for no lines.
std::string wait_words(const std::vector<std::string>& lines);

/// Waiting lines as `cq run`, `cq wait` and `cq logs -f` compare them to
/// say why a job waits once per change: without the estimate's countdown
/// ("next on b, in ~ by estimates"), which moves at every ask.
std::string waiting_gist(std::string text);

/// What `cq show` knows beyond the show reply.
struct show_context {
  std::string ram_source; ///< where the RAM cap came from: "--ram", "default", ...
  bool verbose = false;   ///< -v: every setting, defaults too
};

/// The `cq show` view: sections with labels and values, then allocations.
std::string render_show(const bus::show_rep& rep, std::int64_t now_ms, const render_style& style,
                        const show_context& ctx);

/// A clock time for people: "14:02:11" today (in local time), else
/// "2026-11-30 14:02".
std::string clock_time(std::int64_t at_ms, std::int64_t now_ms);

/// `argv` joined with blanks, each element quoted for a POSIX shell if needed.
std::string shell_join(const std::vector<std::string>& argv);

/// The short reason a job is where it is, as `cq ls` shows it: a queued
/// job's place or dependency, a finished job's outcome.
std::string job_reason(const bus::job_info& j, const std::vector<bus::job_info>& listed,
                       const wait_map& waits = {});

/// A note for the person on stderr (cq submit's sizing, say), for a terminal
/// `width` columns wide: wrapped at blanks, continued lines indented two
/// blanks; one line when `width` is 0 (not a terminal: a log or a pipe keeps
/// each note on one line, for grep). Ends with a newline.
std::string wrapped_note(const std::string& text, std::size_t width);

} // namespace cq::cli
