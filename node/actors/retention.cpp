// [retention] allocations (config.hpp): a finished allocation's directory
// (its output, records and control files) is removed once its exit record
// is older than the window, and a job's state dir once no allocation of
// that job is left here. Never an allocation the daemon still supervises,
// one whose exit the coordinator has not acknowledged yet (its report is
// pending, or it has no `reported` mark), or one a hold names. The sweep runs at start and then
// every 24th of the window, at least an hour apart (every 30 hours for the default 30 days).
//
// A sweep lists the directories and reads the records only of those it has
// not seen finished yet (daemon_state::swept): an exit record, once written,
// never changes, so each is read once in the daemon's life rather than every
// hour. A sweep that can remove nothing reads nothing: after each full sweep
// the daemon knows when the first directory it saw expires, each exit record
// it writes (recorder.cpp, the only writer) moves that moment earlier
// if it expires sooner, and a directory that has expired but must stay (not
// acknowledged, still supervised or held) makes every sweep a full one until
// it goes. A directory made by hand is seen at the latest one window after
// the last full sweep.
//
// The coordinator's forget order (ADR 0072) removes, by the same rules, the
// directories of jobs the coordinator forgot, without waiting for the window.
// Either way a directory is first moved into <state>/trash, at once, and
// removed from there by the remover actor: a crash leaves it whole where it
// was or in the trash, which the next start empties.
#include "daemon_state.hpp"

#include "cq/bus/codec.hpp"
#include "cq/node/files.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

namespace cq::node {

namespace {

constexpr std::int64_t min_sweep_every_ms = 3'600'000;

/// A string field of a record ("" when missing).
std::string text_of(const std::optional<nlohmann::json>& rec, const char* key) {
  if (!rec || !rec->contains(key) || !(*rec)[key].is_string())
    return {};
  return (*rec)[key].get<std::string>();
}

/// The allocations whose directories stay whatever their age: supervised,
/// being recorded, with an exit not acknowledged yet, or named by a hold.
std::set<std::string> kept_allocations(daemon_ptr self) {
  auto& st = self->state;
  std::set<std::string> keep;
  for (auto& [id, e] : st.registry)
    keep.insert(id);
  for (auto& id : st.setup.box->allocations())
    keep.insert(id);
  for (auto& id : st.recording)
    keep.insert(id);
  for (auto& h : st.setup.holds->all())
    keep.insert(h.allocation);
  return keep;
}

/// Removes `dir`: moved aside into the trash at once, then removed by the
/// remover.
void discard(daemon_ptr self, const std::filesystem::path& dir) {
  auto& st = self->state;
  // Out of its directory at once, so that a crash never leaves part of it
  // where recovery, the sweep and the orders look: into the trash, which
  // the remover empties (and a start empties of what a crash left).
  auto aside = st.setup.trash_root / dir.filename();
  auto moved = disk_of(self).move_aside(dir, aside);
  if (!moved)
    spdlog::warn("removing {} where it is: {}", dir.string(), moved.error().message);
  self->send(st.remover, remove_atom::value, (moved ? aside : dir).string());
}

} // namespace

std::int64_t retention_due(daemon_ptr self) {
  auto& st = self->state;
  return st.cfg().identity.retention.allocations_ms ? st.next_sweep_ms : INT64_MAX;
}

void retention_note_exit(daemon_ptr self, std::int64_t finished_ms) {
  auto& st = self->state;
  if (auto window = st.cfg().identity.retention.allocations_ms; window && st.sweep_quiet_until_ms)
    st.sweep_quiet_until_ms = std::min(st.sweep_quiet_until_ms, finished_ms + *window);
}

void sweep_if_due(daemon_ptr self, std::int64_t now) {
  auto& st = self->state;
  auto window = st.cfg().identity.retention.allocations_ms;
  if (!window || now < st.next_sweep_ms)
    return;
  // A directory is removed at most a 24th of the window late.
  st.next_sweep_ms = now + std::max<std::int64_t>(min_sweep_every_ms, *window / 24);
  auto wall = wall_now_ms(self);
  if (wall < st.sweep_quiet_until_ms)
    return; // nothing can have expired since the last full sweep
  auto& disk = disk_of(self);
  // When the next sweep can first remove something: the earliest expiry
  // seen, and at the latest one window from now (directories made by hand).
  auto quiet_until = wall + *window;
  bool stuck = false; // an expired directory stays: every sweep looks again
  auto keep = kept_allocations(self);
  std::set<std::string> jobs_left; // jobs with an allocation directory still here
  std::size_t removed = 0;
  auto listed = disk.list(st.setup.alloc_root);
  // Directories gone since the last sweep (removed by hand) are forgotten.
  std::set<std::string> present(listed.begin(), listed.end());
  std::erase_if(st.swept, [&](const auto& e) { return !present.count(e.first); });
  for (auto& id : listed) {
    auto dir = st.setup.alloc_root / id;
    auto& seen = st.swept[id];
    if (seen.finished_ms == 0) { // new, or not finished when last read
      auto exit = read_json(disk, dir / "exit.json");
      if (seen.job.empty())
        seen.job =
            exit ? text_of(exit, "job") : text_of(read_json(disk, dir / "alloc.json"), "job");
      if (exit && exit->contains("finished_ms") && (*exit)["finished_ms"].is_number_integer())
        seen.finished_ms = std::max<std::int64_t>(1, (*exit)["finished_ms"].get<std::int64_t>());
    }
    bool expired = seen.finished_ms != 0 && seen.finished_ms <= wall - *window;
    // An exit not acknowledged yet is queued again from exit.json at a
    // restart: its directory stays until the `reported` mark says it was.
    if (expired && !keep.count(id) && disk.exists(dir / "reported")) {
      discard(self, dir);
      ++removed;
      st.swept.erase(id);
      continue;
    }
    if (expired)
      stuck = true;
    else if (seen.finished_ms != 0)
      quiet_until = std::min(quiet_until, seen.finished_ms + *window);
    if (!seen.job.empty())
      jobs_left.insert(seen.job);
  }
  std::size_t jobs_removed = 0;
  for (auto& job : disk.list(st.setup.jobs_root))
    if (!jobs_left.count(job)) {
      discard(self, st.setup.jobs_root / job);
      ++jobs_removed;
    }
  st.sweep_quiet_until_ms = stuck ? 0 : quiet_until;
  if (removed || jobs_removed)
    spdlog::info("retention: removed {} finished allocation(s) and {} job state dir(s) older "
                 "than the [retention] window",
                 removed, jobs_removed);
}

namespace {

/// The job allocation directory `id` belongs to ("" when its record is
/// missing), from the sweep's cache if it read it.
std::string job_of(daemon_ptr self, const std::string& id) {
  auto& st = self->state;
  if (auto s = st.swept.find(id); s != st.swept.end() && !s->second.job.empty())
    return s->second.job;
  return text_of(read_json(disk_of(self), st.setup.alloc_root / id / "alloc.json"), "job");
}

/// The jobs of the allocations whose directories stay for now whatever the
/// coordinator forgot: supervised, held, being recorded, with a report not
/// acknowledged yet, or waiting for one (forget_on_ack). A state dir of one
/// of them stays (a workload, or a requeued attempt, may use it).
std::set<std::string> busy_jobs(daemon_ptr self) {
  auto ids = kept_allocations(self);
  for (auto& [a, job] : self->state.forget_on_ack)
    ids.insert(a);
  std::set<std::string> jobs;
  for (auto& a : ids)
    jobs.insert(job_of(self, a));
  return jobs;
}

/// Whether allocation `a`'s directory, and its job's state dir, stay
/// whatever the coordinator forgot: its supervisor runs, or a hold names it.
bool stays(daemon_ptr self, const std::string& a) {
  auto& st = self->state;
  auto& holds = st.setup.holds->all();
  return st.registry.count(a) ||
         std::any_of(holds.begin(), holds.end(), [&](auto& h) { return h.allocation == a; });
}

/// Hands job `job`'s state dir to the remover; whether there was one.
bool remove_job_dir(daemon_ptr self, const std::string& job) {
  auto dir = self->state.setup.jobs_root / job;
  if (job.empty() || !disk_of(self).is_directory(dir))
    return false;
  discard(self, dir);
  return true;
}

struct remover_state {
  node_disk* disk = nullptr;
  static inline const char* name = "cq.node.remover";
};

} // namespace

std::string forget_allocations(daemon_ptr self, std::uint64_t id, const bus::forget_order& o) {
  // Checked whole before anything is removed: a bad order changes nothing.
  if (o.jobs.size() > bus::forget_order_items || o.allocations.size() > bus::forget_order_items)
    return bus::encode_error(id, errc::invalid_argument,
                             fmt::format("forget: at most {} jobs and {} allocations",
                                         bus::forget_order_items, bus::forget_order_items));
  for (auto* list : {&o.jobs, &o.allocations})
    for (auto& x : *list)
      if (!is_valid_id(x))
        return bus::encode_error(id, errc::invalid_argument,
                                 fmt::format("forget: '{}' is not a valid id", x));
  auto& st = self->state;
  auto& disk = disk_of(self);
  auto& box = *st.setup.box;
  std::set<std::string> jobs_kept; // jobs with a directory that stays
  std::size_t removed = 0;
  for (auto& a : o.allocations) {
    auto dir = st.setup.alloc_root / a;
    if (!disk.is_directory(dir)) {
      st.swept.erase(a);
      continue;
    }
    // An exit being recorded or not acknowledged yet goes once it is
    // (note_reported). As the sweep, a directory with no exit record stays
    // (a start recovery left to the coordinator: its process may run). A
    // missing `reported` mark does not keep one: its job is forgotten, so
    // the exit reported again at a restart would tell the coordinator nothing.
    auto job = job_of(self, a);
    if (stays(self, a)) {
      jobs_kept.insert(job);
      continue;
    }
    if (st.recording.count(a) || box.find(a, "exited")) {
      st.forget_on_ack[a] = job;
      continue;
    }
    if (!disk.exists(dir / "exit.json")) {
      jobs_kept.insert(job);
      continue;
    }
    discard(self, dir);
    ++removed;
    st.swept.erase(a);
  }
  // A state dir stays while an allocation of its job stays (or waits). One
  // left by a finished allocation not named here (an order the coordinator
  // split, or lost) may go: its job is forgotten and runs no more.
  std::size_t jobs_removed = 0;
  auto busy = busy_jobs(self);
  for (auto& job : o.jobs)
    if (!jobs_kept.count(job) && !busy.count(job))
      jobs_removed += remove_job_dir(self, job);
  if (removed || jobs_removed)
    spdlog::info("forget: removing {} allocation(s) and {} job state dir(s) of jobs the "
                 "coordinator forgot",
                 removed, jobs_removed);
  return ack(self, id);
}

void note_reported(daemon_ptr self, const std::string& allocation, bool acked) {
  auto& st = self->state;
  auto& disk = disk_of(self);
  auto dir = st.setup.alloc_root / allocation;
  auto f = st.forget_on_ack.find(allocation);
  // A hold made since the order (its cleanup could not confirm its
  // processes gone) keeps it after all.
  if (f != st.forget_on_ack.end() && stays(self, allocation)) {
    st.forget_on_ack.erase(f);
    f = st.forget_on_ack.end();
  }
  if (f == st.forget_on_ack.end()) {
    // Not synced: losing the mark only re-sends an exit the coordinator
    // acknowledges again as already applied.
    if (acked)
      if (auto w = disk.append(dir / "reported", ""); !w)
        spdlog::warn("{}", w.error().message);
    return;
  }
  auto job = std::move(f->second);
  st.forget_on_ack.erase(f);
  discard(self, dir);
  st.swept.erase(allocation);
  if (!busy_jobs(self).count(job))
    remove_job_dir(self, job);
  spdlog::info("forget: removing allocation {} of a job the coordinator forgot, its exit {}",
               allocation, acked ? "acknowledged" : "refused");
}

void empty_trash(daemon_ptr self) {
  auto& st = self->state;
  auto left = disk_of(self).list(st.setup.trash_root);
  if (!left.empty())
    spdlog::info("removing {} director{} an earlier run left half removed in {}", left.size(),
                 left.size() == 1 ? "y" : "ies", st.setup.trash_root.string());
  for (auto& name : left)
    self->send(st.remover, remove_atom::value, (st.setup.trash_root / name).string());
}

remover_actor spawn_remover(caf::actor_system& sys, node_disk* disk) {
  return sys.spawn(
      [disk](remover_actor::stateful_pointer<remover_state> self) -> remover_actor::behavior_type {
        self->state.disk = disk;
        return {
            [=](remove_atom, const std::string& path) {
              if (auto r = self->state.disk->remove_tree(path); !r)
                spdlog::warn("{}", r.error().message);
            },
        };
      });
}

} // namespace cq::node
