// Golden tests of the human views (cq ls, cq show): a job in each state,
// drawn at 80 and 200 columns, without colour (NO_COLOR, a pipe) and with.
// CQ_UPDATE_GOLDEN=1 rewrites tests/fixtures/golden/ from the current code;
// review the diff before committing it.
#include "cq/bus/array_row.hpp"
#include "cq/cli/escape.hpp"
#include "cq/cli/render.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

using namespace cq;
using cq::cli::render_style;

namespace {

constexpr std::int64_t now = 1796212800000; // 2026-12-02 12:00:00 UTC
constexpr std::int64_t sec = 1000;
constexpr std::uint64_t gib = 1ull << 30;

void utc() {
  setenv("TZ", "UTC", 1);
  tzset();
}

bus::job_info base(std::string id, std::string name, bus::job_state s) {
  bus::job_info j;
  j.id = std::move(id);
  j.name = std::move(name);
  j.owner = "ana";
  j.state = s;
  j.argv = {"python3", "train.py", "--epochs", "10", "--note", "two words"};
  j.cwd = "/home/ana/projects/resnet";
  j.submitted_ms = now - 3600 * sec;
  j.effective_ram_bytes = gib;
  j.effective_est_ms = 3600 * 1000;
  j.cpus = 1;
  j.lease_ms = 30 * 60 * 1000;
  j.lost_after_ms = 5 * 60 * 1000;
  j.profile = "python3 train.py";
  return j;
}

std::vector<bus::job_info> one_of_each() {
  std::vector<bus::job_info> v;
  auto q = base("3f2a9c1e-0b7d-4e55-9a10-6c2d8e4f7a01", "eval-small", bus::job_state::queued);
  q.position = 2;
  q.submitted_ms = now - 90 * sec;
  v.push_back(q);
  auto d = base("3f2a9c77-1111-4e55-9a10-6c2d8e4f7a02", "report", bus::job_state::queued);
  d.position = 3;
  d.after = {"a81c0d3b-5e2f-4a6b-8c9d-0e1f2a3b4c5d"};
  v.push_back(d);
  auto r = base("a81c0d3b-5e2f-4a6b-8c9d-0e1f2a3b4c5d", "train-resnet50-imagenet-long-name",
                bus::job_state::running);
  r.node = "gpu-box-1";
  r.started_ms = now - 1800 * sec - 5 * sec;
  r.attempt = 1;
  r.gpus = 2;
  r.vram_bytes = 20 * gib;
  r.lanes = {"gpu0", "gpu1"};
  r.ram_bytes = 32 * gib;
  r.effective_ram_bytes = 32 * gib;
  r.timeout_ms = 6 * 3600 * 1000;
  v.push_back(r);
  auto h = base("0c9e4d21-7a3b-4c5d-8e6f-101112131415", "hi-prio", bus::job_state::queued);
  h.priority = "high";
  h.position = 1;
  h.pinned_node = "mac-mini";
  v.push_back(h);
  auto s = base("5d6e7f80-9192-4a3b-8c4d-5e6f70819203", "prep", bus::job_state::succeeded);
  s.node = "gpu-box-2";
  s.started_ms = now - 3000 * sec;
  s.finished_ms = now - 2900 * sec;
  s.exit_code = 0;
  s.attempt = 1;
  v.push_back(s);
  auto f = base("e1f20304-0506-4708-890a-0b0c0d0e0f10", "grow", bus::job_state::failed);
  f.node = "gpu-box-2";
  f.started_ms = now - 600 * sec;
  f.finished_ms = now - 540 * sec;
  f.reason = bus::reason::oom;
  f.signal = 9;
  f.attempt = 2;
  v.push_back(f);
  auto x = base("e1f2aaaa-0506-4708-890a-0b0c0d0e0f11", "", bus::job_state::failed);
  x.node = "gpu-box-1";
  x.started_ms = now - 200 * sec;
  x.finished_ms = now - 100 * sec;
  x.reason = bus::reason::exit_code;
  x.exit_code = 7;
  x.attempt = 1;
  v.push_back(x);
  auto c = base("77777777-0506-4708-890a-0b0c0d0e0f12", "sweep-7", bus::job_state::cancelled);
  c.finished_ms = now - 30 * sec;
  c.reason = bus::reason::cancelled;
  c.cancelled_by = "ana";
  v.push_back(c);
  return v;
}

std::string golden_path(const std::string& name) {
  return std::string(CQ_TEST_FIXTURES) + "/golden/" + name;
}

void check_golden(const std::string& name, const std::string& got) {
  auto path = golden_path(name);
  if (std::getenv("CQ_UPDATE_GOLDEN")) {
    std::ofstream(path, std::ios::binary) << got;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream want;
  want << in.rdbuf();
  INFO("golden file " << path << " (CQ_UPDATE_GOLDEN=1 rewrites it)");
  CHECK(got == want.str());
}

bus::show_rep show_of(const bus::job_info& j) {
  bus::show_rep rep;
  rep.job = j;
  if (j.attempt > 0) {
    for (std::uint64_t n = 1; n <= j.attempt; ++n) {
      bus::allocation_info a;
      a.id = "alloc-" + std::to_string(n);
      a.job = j.id;
      a.node = j.node;
      a.attempt = n;
      a.lanes = j.lanes;
      a.created_ms = j.started_ms - 2 * sec;
      a.started_ms = j.started_ms - (j.attempt - n) * 100 * sec;
      bool last = n == j.attempt;
      if (!last || j.finished_ms) {
        a.state = bus::alloc_state::finished;
        a.finished_ms = last ? j.finished_ms : a.started_ms + 20 * sec;
        a.reason = last ? j.reason : bus::reason::oom;
        a.exit_code = last ? j.exit_code : std::nullopt;
        a.signal = last ? j.signal : std::optional<std::int64_t>(9);
        a.peak_ram_bytes = last ? 700ull << 20 : 64ull << 20;
      } else {
        a.state = bus::alloc_state::running;
        a.peak_ram_bytes = 12ull * gib;
      }
      rep.allocations.push_back(a);
    }
  }
  if (j.state == bus::job_state::queued)
    rep.waiting = {"gpu-box-1: needs 1 CPU, 0 free",
                   "mac-mini: in a hold until a person releases it"};
  return rep;
}

} // namespace

TEST_CASE("cq ls is drawn in serving order at 80 and 200 columns", "[cli][render]") {
  utc();
  auto jobs = one_of_each();
  cli::sort_serving_order(jobs);
  CHECK(jobs[0].state == bus::job_state::running);
  CHECK(jobs[1].name == "hi-prio");
  CHECK(jobs[2].name == "eval-small");
  CHECK(jobs[3].name == "report");
  CHECK(jobs.back().name == "prep"); // the earliest finished last
  check_golden("ls_80.txt", cli::render_ls(jobs, now, render_style{80, false}));
  check_golden("ls_200.txt", cli::render_ls(jobs, now, render_style{200, false}));
  auto narrow = cli::render_ls(jobs, now, render_style{80, false});
  std::istringstream lines(narrow);
  for (std::string line; std::getline(lines, line);)
    CHECK(cli::display_width(line) <= 80);
}

TEST_CASE("cq ls colours states only when asked", "[cli][render]") {
  utc();
  auto jobs = one_of_each();
  auto plain = cli::render_ls(jobs, now, render_style{200, false});
  auto coloured = cli::render_ls(jobs, now, render_style{200, true});
  CHECK(plain.find('\x1b') == std::string::npos);
  CHECK(coloured.find("\x1b[31mfailed\x1b[0m") != std::string::npos);
  CHECK(coloured.find("\x1b[36mrunning\x1b[0m") != std::string::npos);
}

TEST_CASE("cq show is drawn in sections for a job of each state", "[cli][render]") {
  utc();
  for (const auto& j : one_of_each()) {
    auto key = std::string(to_string(j.state)) + "_" + (j.name.empty() ? "unnamed" : j.name);
    cli::show_context ctx{j.ram_bytes ? "--ram" : "the default", false};
    check_golden("show_" + key + "_80.txt", cli::render_show(show_of(j), now, {80, false}, ctx));
    auto wide = cli::render_show(show_of(j), now, {200, false}, ctx);
    check_golden("show_" + key + "_200.txt", wide);
    CHECK(wide.find("_ms") == std::string::npos);
    CHECK(wide.find("_bytes") == std::string::npos);
    CHECK(wide.back() == '\n');
  }
  auto running = one_of_each()[2];
  auto v = cli::render_show(show_of(running), now, {200, false}, {"--ram", true});
  CHECK(v.find("lease") != std::string::npos);
  CHECK(v.find("profile") != std::string::npos);
  // A cap cq chose is raised after an OOM whatever --retry-oom says: -v
  // says so, not "0 used of 0" (a retry that would never come).
  running.ram_bytes.reset();
  running.retry_oom = 0;
  running.oom_retries = 0;
  v = cli::render_show(show_of(running), now, {200, false}, {"", true});
  CHECK(v.find("0 (cq raises a cap it chose after an OOM)") != std::string::npos);
  CHECK(v.find("used of 0") == std::string::npos);
}

TEST_CASE("cq show ends a stop's line with a newline, not an escaped one", "[cli][render]") {
  utc();
  auto jobs = one_of_each();
  auto j = *std::find_if(jobs.begin(), jobs.end(), [](auto& x) { return x.attempt > 0; });
  auto rep = show_of(j);
  rep.allocations.back().stop_cause = "cancel";
  rep.allocations.back().stop_requested_ms = now - 3 * sec;
  auto out = cli::render_show(rep, now, {80, false}, {"--ram", false});
  CHECK(out.find("  stop requested 3s ago: cancel\n") != std::string::npos);
  CHECK(out.find("\\n") == std::string::npos);
  CHECK(out.back() == '\n');
}

TEST_CASE("cq show gives the node's words on how the last attempt ended, wrapped and escaped",
          "[cli][render]") {
  utc();
  auto jobs = one_of_each();
  auto j = *std::find_if(jobs.begin(), jobs.end(),
                         [](auto& x) { return x.attempt > 0 && x.finished_ms; });
  auto rep = show_of(j);
  rep.allocations.back().detail = "launch failed: cwd /data/runs/missing: not a directory";
  auto out = cli::render_show(rep, now, {200, false}, {"--ram", false});
  CHECK(
      out.find("  " + j.node + " said: launch failed: cwd /data/runs/missing: not a directory\n") !=
      std::string::npos);
  // Long words from the network: cut at 300 columns, wrapped to the
  // terminal, with nothing a terminal would obey.
  std::string words;
  for (int i = 0; i < 30; ++i)
    words += "step-" + std::to_string(i) + (i == 3 ? "\x1b[2J " : " ");
  rep.allocations.back().detail = words + std::string(400, 'x');
  auto narrow = cli::render_show(rep, now, {80, false}, {"--ram", false});
  CHECK(narrow.find('\x1b') == std::string::npos);
  CHECK(narrow.find("step-29") != std::string::npos);
  CHECK(narrow.find(std::string(300, 'x')) == std::string::npos);
  CHECK(narrow.find("\u2026") != std::string::npos);
  std::istringstream lines(narrow);
  for (std::string line; std::getline(lines, line);)
    if (line.find("xxx") == std::string::npos) // one word longer than a line stays whole
      CHECK(cli::display_width(line) <= 80);
  // A lost attempt's words are the coordinator's: not put in the node's mouth.
  rep.allocations.back().detail = "node m1 has been down for 5m (lost-after)";
  rep.allocations.back().reason = bus::reason::lost;
  auto lost = cli::render_show(rep, now, {200, false}, {"--ram", false});
  CHECK(lost.find("  lost: node m1 has been down for 5m (lost-after)\n") != std::string::npos);
  CHECK(lost.find(" said: ") == std::string::npos);
  // An attempt still running has said nothing yet.
  rep.allocations.back().state = bus::alloc_state::running;
  CHECK(cli::render_show(rep, now, {200, false}, {"--ram", false}).find(" said: ") ==
        std::string::npos);
}

TEST_CASE("the shortest unique prefix is at least 8 characters", "[cli][render]") {
  CHECK(cli::unique_prefix_length({"3f2a9c1e-0b7d", "a81c0d3b-5e2f"}) == 8);
  CHECK(cli::unique_prefix_length({"3f2a9c1e-0b7d", "3f2a9c1e-1b7d"}) == 10);
  CHECK(cli::unique_prefix_length({"abc"}) == 3);
  CHECK(cli::unique_prefix_length({}) == 0);
}

TEST_CASE("the unique prefix is the same whether or not the ids' first bytes tell them apart",
          "[cli][render]") {
  // Duplicates need nothing more; a shorter id that is another's prefix,
  // and ids that differ only past their first 8 bytes, do.
  CHECK(cli::unique_prefix_length({"3f2a9c1e-0b7d", "3f2a9c1e-0b7d", "a81c0d3b"}) == 8);
  CHECK(cli::unique_prefix_length({"abc", "abcd"}) == 4);
  CHECK(cli::unique_prefix_length({"ab", std::string("ab\0", 3)}) == 3);
  CHECK(cli::unique_prefix_length({"a81c0d3b-5e2f", "3f2a9c1e-0b7d", "3f2a9c1e-0b7d-9"}) == 14);
  // Many random ids: the answer is what comparing every sorted neighbour gives.
  std::vector<std::string> ids;
  std::uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 5000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    ids.push_back(fmt::format("{:016x}", x)); // 5-byte prefixes collide, surely
  }
  auto sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  auto brute = [&](std::size_t need) {
    for (std::size_t i = 1; i < sorted.size(); ++i) {
      std::size_t c = 0;
      while (c < sorted[i].size() && sorted[i - 1][c] == sorted[i][c])
        ++c;
      if (sorted[i - 1] != sorted[i])
        need = std::max(need, c + 1);
    }
    return need;
  };
  CHECK(brute(5) > 5); // some 5-byte prefixes collide: the sorted path
  CHECK(cli::unique_prefix_length(ids, 5) == brute(5));
  CHECK(brute(8) == 8); // no 8-byte prefix does: the integer keys' path
  CHECK(cli::unique_prefix_length(ids, 8) == 8);
}

TEST_CASE("cq ls says why a queued job waits, in a few words") {
  using cq::cli::wait_words;
  CHECK(wait_words({}).empty());
  CHECK(wait_words({"vm: needs 4 CPUs, 2 free"}) == "needs 4 CPUs, 2 free");
  CHECK(wait_words({"a: no heartbeat yet", "b: no heartbeat yet"}) ==
        "no heartbeat yet (every node)");
  CHECK(wait_words({"a: disabled", "b: needs 4 CPUs, 2 free", "c: down"}) ==
        "a: disabled (+2 nodes)");
  CHECK(wait_words({"a: disabled", "b: down"}) == "a: disabled (+1 node)");
  CHECK(wait_words({"next on b, in ~35s by estimates", "a: disabled", "b: needs 4 CPUs, 2 free"}) ==
        "next on b, in ~35s by estimates");
  bus::job_info q;
  q.id = "0123456789abcdef";
  q.name = "big";
  q.state = bus::job_state::queued;
  q.position = 2;
  q.priority = "medium";
  std::vector<bus::job_info> jobs{q};
  auto plain = cq::cli::render_ls(jobs, 0, render_style{120, false});
  CHECK(plain.find("#2 in medium") != std::string::npos);
  auto told = cq::cli::render_ls(jobs, 0, render_style{120, false}, false,
                                 {{q.id, "needs 4 CPUs, 2 free"}});
  CHECK(told.find("#2: needs 4 CPUs, 2 free") != std::string::npos);
  // Positions count within a level: beside a reason, a level other than
  // medium is named, so a high #1 and a medium #1 read apart.
  auto h = q;
  h.id = "fedcba9876543210";
  h.priority = "high";
  h.position = 1;
  jobs = {h, q};
  auto both = cq::cli::render_ls(jobs, 0, render_style{120, false}, false,
                                 {{q.id, "needs 4 CPUs, 2 free"}, {h.id, "needs 8 CPUs, 2 free"}});
  CHECK(both.find("#1 high: needs 8 CPUs, 2 free") != std::string::npos);
  CHECK(both.find("#2: needs 4 CPUs, 2 free") != std::string::npos);
}

TEST_CASE("a waiting line said again only when more than its countdown changed") {
  using cq::cli::waiting_gist;
  // cq run behind an hour-long job said it every 2 s: ~59m58s, ~59m56s, ...
  CHECK(waiting_gist("next on vm, in ~59m58s by estimates; vm: needs 1 CPU, 0 free") ==
        waiting_gist("next on vm, in ~59m56s by estimates; vm: needs 1 CPU, 0 free"));
  CHECK(waiting_gist("next on vm, in ~59m58s by estimates") == "next on vm, in ~ by estimates");
  // Another node, or another reason, is news.
  CHECK(waiting_gist("next on a, in ~5m by estimates") !=
        waiting_gist("next on b, in ~5m by estimates"));
  CHECK(waiting_gist("vm: needs 1 CPU, 0 free") != waiting_gist("vm: needs 2 CPUs, 0 free"));
  CHECK(waiting_gist("waits for job 3f2a9c1e to succeed") == "waits for job 3f2a9c1e to succeed");
  // Only a countdown within one line goes.
  CHECK(waiting_gist("a, in ~x; b: needs 1 CPU by estimates") ==
        "a, in ~x; b: needs 1 CPU by estimates");
}

TEST_CASE("a rows listing names what a queued job waits for, on the page or not") {
  auto brief = [](std::string id, std::string name, bus::job_state s) {
    bus::job_brief b;
    b.id = std::move(id);
    b.name = std::move(name);
    b.state = s;
    b.position = 1;
    return b;
  };
  auto first = brief("11111111-aaaa", "prep", bus::job_state::running);
  auto second = brief("22222222-bbbb", "train", bus::job_state::queued);
  second.after = bus::string_list{first.id};
  auto third = brief("33333333-cccc", "eval", bus::job_state::queued);
  third.after = bus::string_list{"44444444-dddd-not-on-this-page", first.id};
  std::vector<bus::ls_row> page(3);
  page[0].job = first;
  page[1].job = second;
  page[2].job = third;
  auto out = cq::cli::render_ls_rows(page, 0, render_style{120, false}, {}, 8);
  INFO(out);
  CHECK(out.find("after prep\n") != std::string::npos);        // on the page: by name
  CHECK(out.find("after 44444444 +1\n") != std::string::npos); // off it: by id prefix
  CHECK(out.find("prep   running") != std::string::npos);
}

TEST_CASE("a rows listing draws jobs and arrays, escaped, clipped and coloured", "[cli][render]") {
  utc();
  std::vector<bus::ls_row> page;
  page.reserve(5); // the references below stay valid
  auto add = [&](std::string id, std::string name, bus::job_state s) -> bus::job_brief& {
    auto& b = page.emplace_back().job.emplace();
    b.id = std::move(id);
    b.name = std::move(name);
    b.owner = "ana";
    b.state = s;
    b.submitted_ms = now - 90 * sec;
    return b;
  };
  auto& r = add("a81c0d3b-5e2f-4a6b-8c9d-0e1f2a3b4c5d", "train-resnet50-imagenet-long-name",
                bus::job_state::running);
  r.node = "gpu-box-1";
  r.started_ms = now - 1805 * sec;
  r.lanes = bus::string_list{"gpu0", "gpu1"};
  auto& a = page.emplace_back().array.emplace();
  a.array = "b1c2d3e4-0000-4000-8000-000000000001";
  a.name = "sweep";
  a.tasks = 20;
  a.running = 2, a.queued = 15, a.succeeded = 2, a.failed = 1, a.limit = 4;
  a.nodes = {"gpu-box-1", "gpu-box-2"};
  a.node_count = 2;
  a.submitted_ms = now - 600 * sec;
  a.started_ms = now - 500 * sec;
  auto& q = add("3f2a9c1e-0b7d-4e55-9a10-6c2d8e4f7a01", "evil\x1b[2Jname", bus::job_state::queued);
  q.position = 1;
  q.priority = "high";
  q.pinned_node = "mac-mini";
  auto& u = add("3f2a9c77-1111-4e55-9a10-6c2d8e4f7a02", "\xc3\xa9tude-\xe6\xb7\xb1\xe5\xba\xa6",
                bus::job_state::queued);
  u.position = 2;
  auto& f = add("e1f20304-0506-4708-890a-0b0c0d0e0f10", "grow", bus::job_state::failed);
  f.node = "gpu-box-2";
  f.started_ms = now - 600 * sec;
  f.finished_ms = now - 540 * sec;
  f.reason = bus::reason::oom;
  f.signal = 9;
  cli::wait_map waits{{u.id, "needs 4 CPUs, 2 free\tnow"}};
  for (std::size_t width : {0, 60, 100})
    for (bool colour : {false, true})
      check_golden(fmt::format("ls_rows_{}{}.txt", width, colour ? "_colour" : ""),
                   cli::render_ls_rows(page, now, render_style{width, colour}, waits, 8));
}

TEST_CASE("a page of job rows is cut at the coordinator's prefix; arrays and pages without one "
          "compare the ids") {
  auto page_of = [](std::vector<std::string> ids, bool with_array) {
    std::vector<bus::ls_row> page;
    for (auto& id : ids) {
      auto& b = page.emplace_back().job.emplace();
      b.id = id;
      b.name = "j";
      b.state = bus::job_state::queued;
      b.position = 1;
    }
    if (with_array) {
      auto& a = page.emplace_back().array.emplace();
      a.array = "0123456789ab-array";
      a.name = "sweep";
      a.tasks = 2, a.queued = 2;
    }
    return page;
  };
  auto first_id = [](const std::string& table) {
    auto line = table.substr(table.find('\n') + 1);
    return line.substr(0, line.find(' '));
  };
  // Two ids alike in their first 11 characters.
  std::vector<std::string> ids{"0123456789-aaaa", "0123456789-bbbb"};
  auto style = render_style{200, false};
  // No prefix from the coordinator: compared here, 12 tell them apart.
  CHECK(first_id(cli::render_ls_rows(page_of(ids, false), 0, style, {}, 0)) == "0123456789-a");
  // The coordinator's 14 (it knows every job's id): taken as it is.
  CHECK(first_id(cli::render_ls_rows(page_of(ids, false), 0, style, {}, 14)) == "0123456789-aaa");
  // At least 8, at most the longest id.
  CHECK(first_id(cli::render_ls_rows(page_of({"abcdefghij", "zz"}, false), 0, style, {}, 3)) ==
        "abcdefgh");
  CHECK(first_id(cli::render_ls_rows(page_of({"abcdefghij", "zz"}, false), 0, style, {}, 40)) ==
        "abcdefghij");
  // An array's id is not covered by the coordinator's prefix: compared here
  // (the jobs' ids need 12 between them).
  CHECK(first_id(cli::render_ls_rows(page_of(ids, true), 0, style, {}, 8)) == "0123456789-a");
}

TEST_CASE("a note on stderr is wrapped to the terminal, continued lines indented, and stays on "
          "one line elsewhere",
          "[cli][render]") {
  std::string note = "cq: RAM cap 1.0 GiB (the default: no run of profile 'sh -c echo hi' "
                     "measured yet); if it needs more it is requeued with more; --ram sets a cap "
                     "of your own";
  CHECK(cq::cli::wrapped_note(note, 0) == note + "\n");
  CHECK(cq::cli::wrapped_note("short", 80) == "short\n");
  auto at80 = cq::cli::wrapped_note(note, 80);
  std::istringstream in(at80);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    lines.push_back(l);
  REQUIRE(lines.size() == 2);
  for (auto& l : lines)
    CHECK(cq::cli::display_width(l) <= 80);
  CHECK(lines[1].rfind("  ", 0) == 0);
  // Nothing lost: the words are the note's, in order.
  std::string joined = lines[0] + " " + lines[1].substr(2);
  CHECK(joined == note);
  for (auto w : {40u, 24u})
    for (std::istringstream narrow(cq::cli::wrapped_note(note, w)); !narrow.eof();) {
      std::string l;
      std::getline(narrow, l);
      // A word longer than the width may stand alone; none here is.
      CHECK(cq::cli::display_width(l) <= w);
    }
}

TEST_CASE("a command is shown as a shell line that reads back as the same words", "[cli][render]") {
  CHECK(cli::shell_join({"python3", "train.py", "--lr", "0.1"}) == "python3 train.py --lr 0.1");
  CHECK(cli::shell_join({"sh", "-c", "echo 'hi' there"}) == "sh -c 'echo '\\''hi'\\'' there'");
  // Newlines and tabs (a script given with -c): bash's $'...', not '\n' inside
  // quotes, which a shell would read as a backslash and an n.
  CHECK(cli::shell_join({"python3", "-c", "import os\nfor x in 'ab':\n\tprint(x)\\"}) ==
        "python3 -c $'import os\\nfor x in \\'ab\\':\\n\\tprint(x)\\\\'");
  CHECK(cli::shell_join({std::string("a\x01", 2)}) == "$'a\\x01'");
}

TEST_CASE("an array's row names the nodes its tasks are on, and once all ended, ran on") {
  // A finished array read "-" under NODE, where a finished job names its node.
  bus::job_info t;
  t.array = "0123456789ab-array", t.name = "sweep-1", t.array_index = 1;
  auto row = [&](std::vector<std::pair<bus::job_state, std::string>> tasks) {
    bus::array_row a;
    bus::task_nodes nodes;
    for (auto& [state, node] : tasks) {
      t.state = state, t.node = node;
      bus::count_task(a, t, nodes);
    }
    bus::finish_tasks(a, nodes);
    return a;
  };
  using s = bus::job_state;
  auto running = row({{s::succeeded, "gpu1"}, {s::running, "gpu2"}, {s::queued, ""}});
  CHECK(running.nodes == bus::string_list{"gpu2"});                       // where it runs now
  CHECK(row({{s::succeeded, "gpu1"}, {s::queued, ""}}).node_count == 0u); // none runs
  auto ended = row({{s::succeeded, "gpu1"}, {s::failed, "gpu2"}, {s::succeeded, "gpu1"}});
  CHECK(ended.nodes == bus::string_list{"gpu1", "gpu2"});
  CHECK(ended.node_count == 2u);
  auto one = row({{s::succeeded, "vm"}, {s::succeeded, "vm"}});
  std::vector<bus::ls_row> page{bus::ls_row{}};
  page[0].array = one;
  auto table = cli::render_ls_rows(page, 0, render_style{200, false}, {}, 8);
  CHECK(table.find("succeeded  vm") != std::string::npos);
}

TEST_CASE("an array's row says how many of its tasks are on hold, and is queued while all are") {
  // `cq hold ARRAY` then `cq ls` said "queued, 4 queued": nothing of the hold.
  auto row_of = [](std::uint64_t queued, std::uint64_t held) {
    std::vector<bus::ls_row> page;
    auto& a = page.emplace_back().array.emplace();
    a.array = "0123456789ab-array";
    a.name = "sweep";
    a.tasks = queued + held, a.queued = queued, a.held = held;
    auto table = cli::render_ls_rows(page, 0, render_style{200, false}, {}, 8);
    return table.substr(table.find('\n') + 1);
  };
  auto all_held = row_of(0, 4);
  CHECK(all_held.find("queued") != std::string::npos); // its state
  CHECK(all_held.find("4 on hold") != std::string::npos);
  CHECK(all_held.find("succeeded") == std::string::npos);
  auto some = row_of(2, 2);
  CHECK(some.find("2 queued, 2 on hold") != std::string::npos);
  // Counted as the coordinator and the CLI's folding count them.
  bus::array_row a;
  bus::task_nodes nodes;
  bus::job_info t;
  t.array = "0123456789ab-array", t.name = "sweep-1", t.array_index = 1;
  t.state = bus::job_state::queued;
  bus::count_task(a, t, nodes);
  t.on_hold = true;
  bus::count_task(a, t, nodes);
  CHECK(a.queued == 1u);
  CHECK(a.held == 1u);
}
