// Job rows as one record (job_record.hpp), and the migration to them
// (schema.cpp, version 10).
#include "store/job_record.hpp"
#include "store/schema.hpp"
#include "store/sql.hpp"

#include "cq/bus/codec.hpp"

#include <fmt/format.h>
#include <sqlite3.h>

#include <stdexcept>

namespace cq::coord {
using namespace sql;

std::string encode_job_record(const bus::job_info& j) {
  return bus::encode_record(j, job_columns);
}

bus::job_info decode_job_record(std::string_view record, std::string id, std::string_view state,
                                std::int64_t finished_ms, std::string priority) {
  auto r = bus::decode_record<bus::job_info>(record);
  if (!r)
    throw std::runtime_error(r.error().message);
  auto& j = *r;
  j.id = std::move(id);
  if (!bus::parse(state, j.state))
    throw std::runtime_error("state: not a job state");
  j.finished_ms = finished_ms;
  if (priority != "high" && priority != "medium" && priority != "low")
    throw std::runtime_error("priority: not high, medium or low");
  j.priority = std::move(priority);
  return std::move(j);
}

namespace {

/// A job's fields from the columns of schema 9 and earlier (argv aside: it
/// is copied as stored).
bus::job_info legacy_job(sqlite3_stmt* s) {
  bus::job_info j;
  auto need = [](bool ok, const char* what) {
    if (!ok)
      throw std::runtime_error(what);
  };
  j.id = col_text(s, 0);
  j.name = col_text(s, 1), j.owner = col_text(s, 2);
  need(bus::parse(col_text(s, 3), j.state), "state: not a job state");
  need(bus::parse(col_text(s, 4), j.reason), "reason: not a known reason");
  j.cwd = col_text(s, 5);
  j.ram_bytes = col_opt_u64(s, 6);
  if (sqlite3_column_type(s, 7) != SQLITE_NULL)
    j.pinned_node = col_text(s, 7);
  j.node = col_text(s, 8), j.allocation = col_text(s, 9);
  j.attempt = static_cast<std::uint64_t>(col_int(s, 10));
  j.exit_code = col_opt_int(s, 11), j.signal = col_opt_int(s, 12);
  j.submitted_ms = col_int(s, 13), j.started_ms = col_int(s, 14);
  j.finished_ms = col_int(s, 15);
  j.priority = col_text(s, 16);
  j.gpus = static_cast<std::uint64_t>(col_int(s, 17));
  j.vram_bytes = col_opt_u64(s, 18);
  j.cpus = static_cast<std::uint64_t>(col_int(s, 19));
  j.est_ms = col_opt_u64(s, 20);
  j.timeout_ms = col_opt_u64(s, 21);
  j.after = col_json_list<std::string>(s, 22, "after");
  j.profile = col_text(s, 23);
  j.ram_floor_bytes = static_cast<std::uint64_t>(col_int(s, 24));
  j.ram_start_min_bytes = static_cast<std::uint64_t>(col_int(s, 25));
  j.preempt = col_text(s, 26);
  j.effective_ram_bytes = static_cast<std::uint64_t>(col_int(s, 27));
  j.effective_est_ms = static_cast<std::uint64_t>(col_int(s, 28));
  j.lanes = col_json_list<std::string>(s, 29, "lanes");
  j.lease_ms = static_cast<std::uint64_t>(col_int(s, 30));
  j.lost_after_ms = static_cast<std::uint64_t>(col_int(s, 31));
  j.no_requeue = col_int(s, 32) != 0;
  j.retry_oom = static_cast<std::uint64_t>(col_int(s, 33));
  j.oom_retries = static_cast<std::uint64_t>(col_int(s, 34));
  j.diagnostic = col_int(s, 35) != 0;
  j.array = col_text(s, 36);
  j.array_index = col_opt_u64(s, 37);
  j.array_limit = static_cast<std::uint64_t>(col_int(s, 38));
  j.on_hold = col_int(s, 39) != 0;
  j.output = col_text(s, 40);
  j.pty = col_int(s, 41) != 0;
  return j;
}

} // namespace

void migrate_to_job_records(sqlite3* db) {
  exec(db, R"sql(
  CREATE TABLE jobs_v10(
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, state TEXT NOT NULL,
    finished_ms INTEGER NOT NULL, priority TEXT NOT NULL, rank INTEGER NOT NULL,
    spec_digest TEXT NOT NULL, argv BLOB NOT NULL, env BLOB NOT NULL, env_digest BLOB,
    record BLOB NOT NULL);
  )sql");
  const char* read =
      "SELECT id, name, owner, state, reason, cwd, ram_bytes, pinned_node, node, allocation, "
      "attempt, exit_code, signal, submitted_ms, started_ms, finished_ms, priority, gpus, "
      "vram_bytes, cpus, est_ms, timeout_ms, after, profile, ram_floor_bytes, "
      "ram_start_min_bytes, preempt, effective_ram_bytes, effective_est_ms, lanes, lease_ms, "
      "lost_after_ms, no_requeue, retry_oom, oom_retries, diagnostic, array_id, array_index, "
      "array_limit, on_hold, output, pty, seq, rank, spec_digest, argv, env, env_digest "
      "FROM jobs ORDER BY seq";
  stmt in, out;
  check_sql(db, sqlite3_prepare_v2(db, read, -1, &in.s, nullptr), read);
  const char* write = "INSERT INTO jobs_v10(id, seq, state, finished_ms, priority, rank, "
                      "spec_digest, argv, env, env_digest, record) "
                      "VALUES(:id, :seq, :state, :finished_ms, :priority, :rank, :spec_digest, "
                      ":argv, :env, :env_digest, :record)";
  check_sql(db, sqlite3_prepare_v2(db, write, -1, &out.s, nullptr), write);
  int rc;
  while ((rc = sqlite3_step(in.s)) == SQLITE_ROW) {
    bus::job_info j;
    try {
      j = legacy_job(in.s);
    } catch (const std::exception& e) {
      // Nothing is dropped: the upgrade stops, and the old version still reads the file.
      throw std::runtime_error(fmt::format(
          "jobs row {}: {}: the upgrade to one record per job cannot read it; the file is "
          "unchanged (repair or delete the row, which the previous version's "
          "cq-coordinator --check also names, or restore a backup)",
          col_text(in.s, 0), e.what()));
    }
    auto s = out.s;
    put(s, at(s, ":id"), j.id), put(s, at(s, ":state"), std::string(to_string(j.state)));
    put(s, at(s, ":finished_ms"), j.finished_ms), put(s, at(s, ":priority"), j.priority);
    sqlite3_bind_value(s, at(s, ":seq"), sqlite3_column_value(in.s, 42));
    sqlite3_bind_value(s, at(s, ":rank"), sqlite3_column_value(in.s, 43));
    sqlite3_bind_value(s, at(s, ":spec_digest"), sqlite3_column_value(in.s, 44));
    // argv and the environment as stored (msgpack, or JSON text of early versions).
    sqlite3_bind_value(s, at(s, ":argv"), sqlite3_column_value(in.s, 45));
    sqlite3_bind_value(s, at(s, ":env"), sqlite3_column_value(in.s, 46));
    sqlite3_bind_value(s, at(s, ":env_digest"), sqlite3_column_value(in.s, 47));
    put_blob(s, at(s, ":record"), encode_job_record(j));
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    check_sql(db, rc, "jobs_v10");
  }
  check_sql(db, rc, read);
  // DROP TABLE waits for no statement that reads it.
  sqlite3_finalize(in.s), sqlite3_finalize(out.s);
  in.s = out.s = nullptr;
  exec(db, R"sql(
  DROP TABLE jobs;
  ALTER TABLE jobs_v10 RENAME TO jobs;
  CREATE INDEX jobs_state ON jobs(state);
  )sql");
}

} // namespace cq::coord
