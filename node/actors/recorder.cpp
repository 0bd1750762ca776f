// An allocation's exit: its report, its durable record (exit.json), and the
// recorder actor that writes the records of supervised allocations.
//
// An exit record costs two fsyncs (the file and its directory). For an
// allocation that ends under its supervisor, the recorder writes it while
// the daemon takes the next order; the daemon queues the report when the
// recorder answers that the record is durable (daemon.hpp, invariant 2), and
// until then lists the allocation in its heartbeats (`recording`, invariant
// 13). An end decided while an order is handled (a refused launch, a
// tombstone) is recorded at once: the order's acknowledgement follows it.
// (ADR 0044.)
//
// Records asked for while the recorder writes are written next, together,
// as the coordinator's store groups commits (ADR 0053): a request is kept
// and a `write` sent to itself, which comes after every request already in
// its mailbox; that `write` writes all kept records as one group
// (node_disk::write_atomic_all) and answers each. A request that finds
// nothing else waiting is written at once, as before. With many ending at
// once (a wide node), a journaling file system commits the group about
// twice, not twice a record.
#include "node/actors/daemon_state.hpp"
#include "node/actors/records.hpp"

#include "cq/json.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace cq::node {

namespace {

/// Kept requests are answered by the next `write`. Should the recorder die
/// first, they get no answer (CAF 0.17 sends none for a dropped promise):
/// the daemon, linked to it, dies with it, and a restarted daemon records
/// those exits again from cq-shim's status files (recovery.cpp).
struct recorder_state {
  node_disk* disk = nullptr;
  std::vector<file_write> group;                     ///< kept, not yet written
  std::vector<caf::typed_response_promise<bool>> to; ///< each one's answer
  static inline const char* name = "cq.node.recorder";
};

using recorder_ptr = recorder_actor::stateful_pointer<recorder_state>;

/// Whether record `w` of a group was written (logged when not).
bool written(const status& w) {
  if (!w)
    spdlog::error("{}", w.error().message);
  return static_cast<bool>(w);
}

recorder_actor::behavior_type recorder_behavior(recorder_ptr self, node_disk* disk) {
  self->state.disk = disk;
  return {
      [=](record_atom, std::string& file, std::string& text) -> caf::result<bool> {
        auto& st = self->state;
        if (st.group.empty() && self->mailbox().empty()) {
          // Alone: written now, a group of one.
          return written(st.disk->write_atomic_all({{std::move(file), std::move(text)}}).front());
        }
        if (st.group.empty())
          self->send(self, write_atom::value);
        st.group.push_back({std::move(file), std::move(text)});
        st.to.push_back(self->make_response_promise<bool>());
        return st.to.back();
      },
      [=](write_atom) {
        auto& st = self->state;
        auto group = std::exchange(st.group, {});
        auto to = std::exchange(st.to, {});
        auto w = st.disk->write_atomic_all(group);
        for (std::size_t i = 0; i < to.size(); ++i)
          to[i].deliver(written(w[i]));
      },
  };
}

/// The exited report of `end`; a GPU allocation gives back its GPU lock
/// reference here (after its cleanup, or when its launch failed).
bus::report_req exit_report(daemon_ptr self, const alloc_end& end) {
  auto& st = self->state;
  std::optional<std::uint64_t> peak_vram_bytes;
  if (auto g = st.setup.gpu->finish(end.allocation))
    peak_vram_bytes = g->peak_vram_bytes;
  bus::report_req r;
  r.kind = "exited";
  r.allocation = end.allocation;
  r.job = end.job;
  r.exit_code = end.exit_code;
  r.signal = end.signal;
  r.reason = end.reason;
  r.wall_ms = end.wall_ms;
  r.peak_ram_bytes = end.peak_ram_bytes;
  r.peak_vram_bytes = peak_vram_bytes;
  if (!end.detail.empty())
    r.detail = end.detail.substr(0, 16 * 1024);
  r.at_ms = wall_now_ms(self);
  return r;
}

/// The exit record (exit.json) of report `r`: what a restarted daemon
/// reports again until the coordinator acknowledges it, and what retention
/// dates.
exit_record exit_record_of(daemon_ptr self, const bus::report_req& r, std::uint64_t attempt) {
  exit_record rec;
  rec.allocation = r.allocation;
  rec.job = r.job;
  rec.attempt = attempt;
  rec.exit_code = r.exit_code;
  rec.signal = r.signal;
  rec.reason = to_string(r.reason);
  rec.wall_ms = r.wall_ms;
  rec.peak_ram_bytes = r.peak_ram_bytes;
  rec.peak_vram_bytes = r.peak_vram_bytes;
  rec.finished_ms = r.at_ms ? r.at_ms : wall_now_ms(self);
  rec.detail = r.detail;
  return rec;
}

std::filesystem::path exit_file(daemon_ptr self, const std::string& allocation) {
  return self->state.setup.alloc_root / allocation / "exit.json";
}

/// The recorder answered for `r`'s record: the report is queued (persisted
/// in the outbox when the record could not be written).
void recorded(daemon_ptr self, bus::report_req& r, std::int64_t finished_ms, bool ok) {
  self->state.recording.erase(r.allocation);
  if (ok)
    retention_note_exit(self, finished_ms);
  queue_report(self, std::move(r), !ok);
  arm(self);
}

} // namespace

recorder_actor spawn_recorder(caf::actor_system& sys, node_disk* disk) {
  return sys.spawn(recorder_behavior, disk);
}

bool write_exit_record(daemon_ptr self, const bus::report_req& r, std::uint64_t attempt) {
  auto rec = exit_record_of(self, r, attempt);
  auto w = disk_of(self).write_atomic(exit_file(self, r.allocation), json_text(rec) + "\n");
  if (!w)
    spdlog::error("{}", w.error().message);
  else
    retention_note_exit(self, rec.finished_ms);
  return static_cast<bool>(w);
}

void finish(daemon_ptr self, const alloc_end& end, bool persist) {
  auto r = exit_report(self, end);
  bool written = write_exit_record(self, r, end.attempt);
  queue_report(self, r, persist || !written);
}

void finish_recorded(daemon_ptr self, const alloc_end& end) {
  auto& st = self->state;
  auto r = exit_report(self, end);
  auto rec = exit_record_of(self, r, end.attempt);
  st.recording.insert(r.allocation);
  self->request(st.recorder, caf::infinite, record_atom::value,
                exit_file(self, r.allocation).string(), json_text(rec) + "\n")
      .then([self, r, at = rec.finished_ms](bool ok) mutable { recorded(self, r, at, ok); },
            [self, r, at = rec.finished_ms](caf::error&) mutable {
              recorded(self, r, at, false); // the recorder is gone: the outbox keeps it
            });
}

} // namespace cq::node
