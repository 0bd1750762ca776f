#include "store.hpp"
#include "store/env_digests.hpp"
#include "store/job_record.hpp"
#include "store/schema.hpp"
#include "store/sql.hpp"
#include "store/store_files.hpp"

#include "cq/bus/codec.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sodium.h>
#include <sqlite3.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace cq::coord {
using namespace sql;

struct store::statements {
  stmt put_job, upd_job, put_alloc, put_node, put_token, put_invite, put_audit, put_profile,
      del_profile, put_order, put_event, put_operation, del_operations, del_history_events,
      del_left_events, del_history_allocs, del_left_allocs, del_history_jobs, del_history_envs,
      put_grant, put_env, get_payload, get_operation, begin, commit, rollback;
  /// The job statements' parameters, looked up by name once (sql::at).
  struct job_binds {
    int id = 0, seq = 0, state = 0, finished_ms = 0, record = 0, priority = 0, rank = 0,
        spec_digest = 0, argv = 0, env = 0, env_digest = 0;
  } put_at, upd_at;
  env_digests envs;
};

void sqlite_without_memory_statistics() {
  static std::once_flag once;
  std::call_once(once, [] { sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); });
}

struct store::watched {
  std::string path;
  file_id db, wal;
};

store::store(const std::string& path, const store_options& opts)
    : st_(std::make_unique<statements>()), watch_(std::make_unique<watched>()) {
  if (opts.synchronous != "FULL" && opts.synchronous != "NORMAL" && opts.synchronous != "OFF")
    throw std::runtime_error("synchronous: must be FULL, NORMAL or OFF");
  sqlite_without_memory_statistics();
  // No mutex around each call (SQLITE_OPEN_NOMUTEX): one thread at a time
  // uses the connection (the store actor, and before it recovery's load),
  // and recovery's load makes a call per column of 100,000 rows.
  if (sqlite3_open_v2(path.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      opts.vfs.empty() ? nullptr : opts.vfs.c_str()) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw std::runtime_error(fmt::format("cannot open {}: {}", path, msg));
  }
  sqlite3_busy_timeout(db_, 5000);
  exec("PRAGMA journal_mode=WAL");
  exec(fmt::format("PRAGMA synchronous={}", opts.synchronous).c_str());
  exec("PRAGMA foreign_keys=ON");
  // 512 KiB of page cache instead of SQLite's 2 MiB: commits append to the
  // hot ends of a few B-trees, and a full read (recovery) streams through;
  // what a larger cache holds is RSS the memory bound counts (docs/adr/0033).
  exec("PRAGMA cache_size=-512");
  migrate();
  // The log's space ahead of its commits (docs/adr/0069); with the default
  // VFS only (cq-sim's keeps its own files). No other writer appends to the
  // log meanwhile: a coordinator opens its store only under its state dir's
  // lock (main.cpp), and this connection's own writes are done.
  if (opts.vfs.empty())
    reserve_wal(path + "-wal");
  watch_->path = path;
  watch_->db = identify(path);
  watch_->wal = identify(path + "-wal");
  auto prep = [&](stmt& s, const char* sql) {
    check_sql(db_, sqlite3_prepare_v2(db_, sql, -1, &s.s, nullptr), sql);
  };
  // A job's row is keyed by its seq (docs/adr/0046). The first write inserts
  // it: a seq taken by another job fails the batch. argv, env (env_digest),
  // seq and spec_digest never change after it; priority and rank change only
  // through order rows (records.hpp).
  prep(st_->put_job,
       "INSERT INTO jobs(id, seq, state, finished_ms, priority, rank, spec_digest, argv, env, "
       "env_digest, record) VALUES(:id, :seq, :state, :finished_ms, :priority, :rank, "
       ":spec_digest, :argv, :env, :env_digest, :record)");
  // A later write (a job actor's) finds the row by seq, and changes only
  // what can change.
  prep(st_->upd_job, "UPDATE jobs SET state = :state, finished_ms = :finished_ms, record = "
                     ":record WHERE seq = :seq AND id = :id");
  auto* pj = st_->put_job.s;
  st_->put_at = {at(pj, ":id"),          at(pj, ":seq"),         at(pj, ":state"),
                 at(pj, ":finished_ms"), at(pj, ":record"),      at(pj, ":priority"),
                 at(pj, ":rank"),        at(pj, ":spec_digest"), at(pj, ":argv"),
                 at(pj, ":env"),         at(pj, ":env_digest")};
  auto* uj = st_->upd_job.s;
  st_->upd_at = {at(uj, ":id"), at(uj, ":seq"), at(uj, ":state"), at(uj, ":finished_ms"),
                 at(uj, ":record")};
  prep(st_->put_alloc, row_columns::upsert<bus::allocation_info>("allocations", "id").c_str());
  prep(st_->put_event,
       "INSERT INTO events(job, job_seq, seq, kind, at_ms, detail) VALUES(?,?,?,?,?,?)");
  prep(st_->put_order, "UPDATE jobs SET priority = ?, rank = ? WHERE seq = ? AND id = ?");
  prep(st_->del_operations, "DELETE FROM operations WHERE at_ms < ?");
  // History expiry: a finished job that ended before ?1 (or at ?1, submitted
  // before seq ?2), then what only it named, each found through the index of
  // finished jobs' ends (v14). The events of the job that holds the newest
  // event row stay (all of them, so its stream stays gapless; a later pass
  // takes them once that job is gone): event ids are rowids, and SQLite
  // would reuse the largest one if it were deleted, under a follower's
  // cursor. What earlier passes left (those events, an allocation that ended
  // after its job, environments no job names) is found by reading the whole
  // table: only a pass with `leftovers` does that (history_expiry).
  const std::string expired = "state IN ('succeeded', 'failed', 'cancelled') AND finished_ms > 0 "
                              "AND finished_ms <= ?1 AND (finished_ms < ?1 OR seq < ?2)";
  const std::string finished = "jobs INDEXED BY jobs_finished";
  const std::string kept = " AND job_seq != (SELECT job_seq FROM events WHERE id = (SELECT "
                           "MAX(id) FROM events))";
  prep(st_->del_history_events, ("DELETE FROM events WHERE job_seq IN (SELECT seq FROM " +
                                 finished + " WHERE " + expired + ")" + kept)
                                    .c_str());
  prep(st_->del_left_events,
       ("DELETE FROM events WHERE job_seq NOT IN (SELECT seq FROM jobs)" + kept).c_str());
  // An expired job's allocations ended by the time it did, at ?1 at the
  // latest, or never started (0); one that ended after that (a stop
  // confirmed late) is left for a later pass, once its job's row is gone.
  prep(st_->del_history_allocs, ("DELETE FROM allocations WHERE finished_ms <= ?1 AND job IN "
                                 "(SELECT id FROM " +
                                 finished + " WHERE " + expired + ")")
                                    .c_str());
  prep(st_->del_left_allocs,
       "DELETE FROM allocations WHERE finished_ms < ?1 AND job NOT IN (SELECT id FROM jobs)");
  prep(st_->del_history_jobs, ("DELETE FROM " + finished + " WHERE " + expired).c_str());
  prep(st_->del_history_envs, "DELETE FROM envs WHERE digest NOT IN (SELECT env_digest FROM "
                              "jobs WHERE env_digest IS NOT NULL)");
  prep(st_->put_env, "INSERT OR IGNORE INTO envs(digest, env) VALUES(?, ?)");
  prep(st_->get_payload, "SELECT argv, COALESCE(envs.env, jobs.env), record, state, "
                         "finished_ms, priority FROM jobs LEFT JOIN envs ON envs.digest = "
                         "jobs.env_digest WHERE seq = ? AND id = ?");
  prep(st_->get_operation, "SELECT result FROM operations WHERE id = ?");
  prep(st_->put_profile, "INSERT OR REPLACE INTO profiles(key, runs, peak_ram, peak_vram, wall, "
                         "updated_ms) VALUES(?,?,?,?,?,?)");
  prep(st_->del_profile, "DELETE FROM profiles WHERE key = ?");
  prep(st_->put_node, "INSERT OR REPLACE INTO nodes(name, state, created_ms, enabled, "
                      "disabled_reason, curve_key) VALUES(?,?,?,?,?,?)");
  prep(st_->put_grant, "INSERT OR REPLACE INTO grants(job, node, reason, who, created_ms, state, "
                       "ended_ms) VALUES(?,?,?,?,?,?,?)");
  // The first record of an id stays: two history passes in flight may both
  // carry a forgotten job's replay record (history.cpp).
  prep(st_->put_operation,
       "INSERT OR IGNORE INTO operations(id, kind, digest, result, at_ms) VALUES(?,?,?,?,?)");
  prep(st_->put_token, "INSERT OR REPLACE INTO tokens(hash, identity, role, created_ms, "
                       "revoked_ms) VALUES(?,?,?,?,?)");
  prep(st_->put_invite,
       "INSERT OR REPLACE INTO invites(hash, node, expires_ms, used) VALUES(?,?,?,?)");
  prep(st_->put_audit,
       "INSERT INTO audit(at_ms, who, role, op, target, outcome, args) VALUES(?,?,?,?,?,?,?)");
  prep(st_->begin, "BEGIN IMMEDIATE");
  prep(st_->commit, "COMMIT");
  prep(st_->rollback, "ROLLBACK");
}

std::optional<std::string> store::check_file() {
  auto& w = *watch_;
  if (!w.db.exists)
    return std::nullopt; // not a file (SQLite's memdb, cq-sim's studies): nothing to watch
  auto now = identify(w.path);
  if (!now.exists)
    return fmt::format("the state database {} was deleted under the running coordinator; "
                       "stopping before acknowledging anything more (restore it, then start "
                       "again)",
                       w.path);
  if (w.db.exists && (now.dev != w.db.dev || now.ino != w.db.ino))
    return fmt::format("the state database {} was replaced under the running coordinator by "
                       "another file; stopping before acknowledging anything more",
                       w.path);
  auto wal = identify(w.path + "-wal");
  if (w.wal.exists && (!wal.exists || wal.dev != w.wal.dev || wal.ino != w.wal.ino))
    return fmt::format("the write-ahead log {}-wal was deleted or replaced under the running "
                       "coordinator; stopping before acknowledging anything more",
                       w.path);
  if (!w.wal.exists && wal.exists)
    w.wal = wal;
  return std::nullopt;
}

store::~store() {
  st_.reset();
  sqlite3_close(db_);
}

void store::exec(const char* sql) {
  sql::exec(db_, sql);
}

void store::migrate() {
  stmt s;
  check_sql(db_, sqlite3_prepare_v2(db_, "PRAGMA user_version", -1, &s.s, nullptr), "user_version");
  sqlite3_step(s.s);
  auto version = static_cast<std::size_t>(sqlite3_column_int(s.s, 0));
  sqlite3_reset(s.s); // a pending statement would keep a migration from dropping a table
  auto all = migrations();
  auto latest = all.size();
  if (version > latest)
    throw std::runtime_error(fmt::format(
        "database schema version {} is newer than this cq-coordinator ({})", version, latest));
  for (auto v = version; v < latest; ++v) {
    exec("BEGIN IMMEDIATE");
    try {
      if (all[v].sql)
        exec(all[v].sql);
      if (all[v].code)
        all[v].code(db_);
      exec(fmt::format("PRAGMA user_version={}", v + 1).c_str());
      exec("COMMIT");
    } catch (...) {
      exec("ROLLBACK");
      throw;
    }
  }
}

std::optional<std::string> store::apply(const change_batch& batch) {
  const change_batch* one[] = {&batch};
  return apply(one);
}

std::optional<std::string> store::apply(std::span<const change_batch* const> batches) {
  auto run = [&](sqlite3_stmt* s) {
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc != SQLITE_DONE)
      throw std::runtime_error(sqlite3_errmsg(db_));
  };
  // A job's environment is stored once per distinct content (envs, by its
  // digest), and one equal to a recent one is not encoded, hashed or
  // written again (env_digests.hpp). A row without one (a job actor's later
  // write, which leaves env as it is) costs nothing.
  auto& envs = st_->envs;
  auto env_digest = [&](const std::shared_ptr<const bus::env_map>& env) {
    if (!env)
      return std::optional<std::string>();
    if (auto* known = envs.find(*env))
      return std::optional<std::string>(*known);
    auto blob = bus::encode_env(*env);
    std::string digest(16, '\0');
    crypto_generichash(reinterpret_cast<unsigned char*>(digest.data()), digest.size(),
                       reinterpret_cast<const unsigned char*>(blob.data()), blob.size(), nullptr,
                       0);
    auto s = st_->put_env.s;
    put_blob(s, 1, digest), put_blob(s, 2, blob);
    run(s);
    envs.add(env, digest);
    return std::optional<std::string>(std::move(digest));
  };
  static const std::string no_env = bus::encode_env({});
  try {
    run(st_->begin.s);
  } catch (const std::exception& e) {
    envs.forget();
    return fmt::format("begin: {}", e.what());
  }
  try {
    for (auto* batch : batches)
      for (auto& c : *batch) {
        std::visit(
            [&](auto& r) {
              using T = std::decay_t<decltype(r)>;
              if constexpr (std::is_same_v<T, job_row>) {
                auto& j = r.info;
                auto record = encode_job_record(j);
                {
                  auto u = st_->upd_job.s;
                  auto& b = st_->upd_at;
                  put(u, b.id, j.id), put(u, b.seq, r.seq);
                  put(u, b.state, std::string(to_string(j.state)));
                  put(u, b.finished_ms, j.finished_ms);
                  put_blob(u, b.record, record);
                  run(u);
                  if (sqlite3_changes(db_) > 0)
                    return; // the row existed: argv and env stay as they are
                }
                auto s = st_->put_job.s;
                auto& b = st_->put_at;
                put(s, b.id, j.id), put(s, b.seq, r.seq);
                put(s, b.state, std::string(to_string(j.state)));
                put(s, b.finished_ms, j.finished_ms);
                put(s, b.priority, j.priority), put(s, b.rank, r.rank);
                put(s, b.spec_digest, r.spec_digest);
                put_blob(s, b.argv, bus::encode_strings(j.argv));
                // env: empty when envs holds it (env_digest), else the empty map.
                put_blob(s, b.env, r.env ? std::string() : no_env);
                if (auto digest = env_digest(r.env))
                  put_blob(s, b.env_digest, *digest);
                put_blob(s, b.record, record);
                run(s);
              } else if constexpr (std::is_same_v<T, bus::allocation_info>) {
                row_columns::bind(st_->put_alloc.s, r);
                run(st_->put_alloc.s);
              } else if constexpr (std::is_same_v<T, event_row>) {
                auto s = st_->put_event.s;
                put(s, 1, r.job), put(s, 2, r.job_seq), put(s, 3, r.seq), put(s, 4, r.kind);
                put(s, 5, r.at_ms), put(s, 6, r.detail);
                run(s);
              } else if constexpr (std::is_same_v<T, node_row>) {
                auto s = st_->put_node.s;
                put(s, 1, r.name), put(s, 2, r.state), put(s, 3, r.created_ms);
                put(s, 4, r.enabled), put(s, 5, r.disabled_reason), put(s, 6, r.curve_key);
                run(s);
              } else if constexpr (std::is_same_v<T, token_row>) {
                auto s = st_->put_token.s;
                put(s, 1, r.hash), put(s, 2, r.identity), put(s, 3, r.role),
                    put(s, 4, r.created_ms);
                put(s, 5, r.revoked_ms);
                run(s);
              } else if constexpr (std::is_same_v<T, invite_row>) {
                auto s = st_->put_invite.s;
                put(s, 1, r.hash), put(s, 2, r.node), put(s, 3, r.expires_ms), put(s, 4, r.used);
                run(s);
              } else if constexpr (std::is_same_v<T, profile_row>) {
                if (r.runs == 0) { // a removal (cq profile rm): no run is ever stored as 0
                  auto s = st_->del_profile.s;
                  put(s, 1, r.key);
                  run(s);
                  return;
                }
                auto s = st_->put_profile.s;
                put(s, 1, r.key), put(s, 2, r.runs),
                    put(s, 3, nlohmann::json(r.peak_ram_bytes).dump());
                put(s, 4, nlohmann::json(r.peak_vram_bytes).dump()),
                    put(s, 5, nlohmann::json(r.wall_ms).dump());
                put(s, 6, r.updated_ms);
                run(s);
              } else if constexpr (std::is_same_v<T, order_row>) {
                auto s = st_->put_order.s;
                put(s, 1, r.priority), put(s, 2, r.rank), put(s, 3, r.seq), put(s, 4, r.job);
                run(s);
                if (sqlite3_changes(db_) != 1)
                  throw std::runtime_error(fmt::format("no job {} to move", r.job));
              } else if constexpr (std::is_same_v<T, bus::grant_info>) {
                auto s = st_->put_grant.s;
                put(s, 1, r.job), put(s, 2, r.node), put(s, 3, r.reason), put(s, 4, r.who);
                put(s, 5, r.created_ms), put(s, 6, r.state), put(s, 7, r.ended_ms);
                run(s);
              } else if constexpr (std::is_same_v<T, operation_row>) {
                auto s = st_->put_operation.s;
                put(s, 1, r.id), put(s, 2, r.kind), put(s, 3, r.digest), put_blob(s, 4, r.result);
                put(s, 5, r.at_ms);
                run(s);
              } else if constexpr (std::is_same_v<T, operation_expiry>) {
                auto s = st_->del_operations.s;
                put(s, 1, r.before_ms);
                run(s);
              } else if constexpr (std::is_same_v<T, history_expiry>) {
                auto gone = [&](sqlite3_stmt* s, bool seq) {
                  put(s, 1, r.before_ms);
                  if (seq)
                    put(s, 2, r.before_seq);
                  run(s);
                };
                gone(st_->del_history_events.s, true);
                if (r.leftovers)
                  run(st_->del_left_events.s);
                gone(st_->del_history_allocs.s, true);
                if (r.leftovers)
                  gone(st_->del_left_allocs.s, false);
                gone(st_->del_history_jobs.s, true);
                if (r.leftovers)
                  run(st_->del_history_envs.s);
                envs.forget(); // rows it knew may be gone
              } else {
                static_assert(std::is_same_v<T, audit_row>);
                auto s = st_->put_audit.s;
                put(s, 1, r.at_ms), put(s, 2, r.who), put(s, 3, r.role), put(s, 4, r.op);
                put(s, 5, r.target), put(s, 6, r.outcome), put(s, 7, r.args);
                run(s);
              }
            },
            c);
      }
    run(st_->commit.s);
    return std::nullopt;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    envs.forget(); // the rollback takes the rows this transaction wrote
    sqlite3_step(st_->rollback.s);
    sqlite3_reset(st_->rollback.s);
    return msg;
  }
}

snapshot store::load() {
  snapshot out;
  // Each row is read on its own: a damaged row is named (table and key) and
  // the rest is still read, so that --check can list every one.
  auto query = [&](const char* table, const char* sql, auto&& row) {
    stmt s;
    check_sql(db_, sqlite3_prepare_v2(db_, sql, -1, &s.s, nullptr), sql);
    int rc;
    while ((rc = sqlite3_step(s.s)) == SQLITE_ROW) {
      try {
        row(s.s);
      } catch (const std::exception& e) {
        out.damaged.push_back(fmt::format("{} row {}: {}", table, col_text(s.s, 0), e.what()));
      }
    }
    check_sql(db_, rc, sql);
  };
  auto need = [](bool ok, const char* what) {
    if (!ok)
      throw std::runtime_error(what);
  };
  // Room for every job first: growing would copy or rehash each row again.
  query("jobs", "SELECT COUNT(*) FROM jobs", [&](sqlite3_stmt* s) {
    auto n = static_cast<std::size_t>(col_int(s, 0));
    out.jobs.reserve(n);
  });
  // Decoding the records is most of reading the jobs: a second thread
  // decodes each chunk of rows while this one reads the next (a restart on
  // 100,000 jobs reads and decodes at once on two cores). A row's slot is
  // made here, in order; one that is damaged is named and dropped after.
  struct raw_job {
    std::string record, id, state, priority, argv_error;
    std::int64_t finished_ms = 0;
    bus::job_info* into = nullptr;
  };
  constexpr std::size_t chunk_rows = 2048;
  std::vector<raw_job> chunk, decoding;
  std::vector<std::pair<std::size_t, std::string>> failed; // row, why (the worker's)
  std::size_t rows = 0;
  std::thread worker;
  struct joined {
    std::thread& t;
    ~joined() {
      if (t.joinable()) // a failed query leaves by an exception
        t.join();
    }
  } join_worker{worker};
  auto decode = [&failed](std::vector<raw_job>& raws, std::size_t first) {
    for (std::size_t i = 0; i < raws.size(); ++i) {
      auto& r = raws[i];
      try {
        auto argv = std::move(r.into->argv);
        *r.into = decode_job_record(r.record, std::move(r.id), r.state, r.finished_ms,
                                    std::move(r.priority));
        if (!r.argv_error.empty())
          throw std::runtime_error(r.argv_error);
        r.into->argv = std::move(argv);
      } catch (const std::exception& e) {
        failed.emplace_back(first + i, e.what());
      }
    }
  };
  auto hand_over = [&] {
    if (worker.joinable())
      worker.join();
    decoding.swap(chunk);
    chunk.clear();
    worker = std::thread(decode, std::ref(decoding), rows - decoding.size());
  };
  query("jobs",
        "SELECT id, seq, state, finished_ms, priority, rank, spec_digest, argv, record "
        "FROM jobs ORDER BY seq",
        [&](sqlite3_stmt* s) {
          job_key k;
          k.id = col_text(s, 0);
          k.seq = static_cast<std::uint64_t>(col_int(s, 1));
          k.rank = col_int(s, 5);
          k.spec_digest = col_text(s, 6);
          auto& j = out.job_infos.emplace_back();
          raw_job r{std::string(col_view(s, 8)),
                    k.id,
                    col_text(s, 2),
                    col_text(s, 4),
                    {},
                    col_int(s, 3),
                    &j};
          try {
            j.argv = col_strings(s, 7);
            if (j.argv.empty())
              r.argv_error = "argv: empty";
          } catch (const std::exception& e) {
            r.argv_error = fmt::format("argv: {}", e.what());
          }
          out.jobs.push_back(std::move(k));
          chunk.push_back(std::move(r));
          if (++rows % chunk_rows == 0)
            hand_over();
        });
  if (!chunk.empty())
    hand_over();
  if (worker.joinable())
    worker.join();
  // Damaged rows, named in row order as when each was decoded on its own.
  for (auto& [row, why] : failed)
    out.damaged.push_back(fmt::format("jobs row {}: {}", out.jobs[row].id, why));
  for (auto f = failed.rbegin(); f != failed.rend(); ++f) {
    auto at = static_cast<std::ptrdiff_t>(f->first);
    out.jobs.erase(out.jobs.begin() + at);
    out.job_infos.erase(out.job_infos.begin() + at);
  }
  query("allocations",
        row_columns::select<bus::allocation_info>("allocations", "ORDER BY created_ms, rowid")
            .c_str(),
        [&](sqlite3_stmt* s) {
          auto a = row_columns::read<bus::allocation_info>(s);
          need(a.stop_cause.empty() || a.stop_cause == "cancel" || a.stop_cause == "yield" ||
                   a.stop_cause == "fence",
               "stop_cause: not cancel, yield or fence");
          out.allocations.push_back(std::move(a));
        });
  query("nodes",
        "SELECT name, state, created_ms, enabled, disabled_reason, curve_key FROM nodes "
        "ORDER BY name",
        [&](sqlite3_stmt* s) {
          node_row n{col_text(s, 0),     col_text(s, 1), col_int(s, 2),
                     col_int(s, 3) != 0, col_text(s, 4), col_text(s, 5)};
          need(n.state == "pending" || n.state == "approved", "state: not pending or approved");
          out.nodes.push_back(std::move(n));
        });
  query("profiles", "SELECT key, runs, peak_ram, peak_vram, wall, updated_ms FROM profiles",
        [&](sqlite3_stmt* s) {
          profile_row p;
          p.key = col_text(s, 0);
          p.runs = static_cast<std::uint64_t>(col_int(s, 1));
          p.peak_ram_bytes = col_json_list<std::uint64_t>(s, 2, "peak_ram");
          p.peak_vram_bytes = col_json_list<std::uint64_t>(s, 3, "peak_vram");
          p.wall_ms = col_json_list<std::uint64_t>(s, 4, "wall");
          p.updated_ms = col_int(s, 5);
          out.profiles.push_back(std::move(p));
        });
  query("tokens", "SELECT hash, identity, role, created_ms, revoked_ms FROM tokens",
        [&](sqlite3_stmt* s) {
          out.tokens.push_back(
              {col_text(s, 0), col_text(s, 1), col_text(s, 2), col_int(s, 3), col_int(s, 4)});
        });
  // Covered by the (job_seq, seq) index: the table's rows are not read.
  query("events", "SELECT job_seq, MAX(seq), COUNT(*) FROM events GROUP BY job_seq",
        [&](sqlite3_stmt* s) {
          auto job_seq = static_cast<std::uint64_t>(col_int(s, 0));
          auto last = static_cast<std::uint64_t>(col_int(s, 1));
          need(last == static_cast<std::uint64_t>(col_int(s, 2)), "seq: not gapless from 1");
          out.event_seqs.emplace_back(job_seq, last);
        });
  query("grants",
        "SELECT job, node, reason, who, created_ms, state, ended_ms FROM grants "
        "ORDER BY created_ms, rowid",
        [&](sqlite3_stmt* s) {
          bus::grant_info g{col_text(s, 1), col_text(s, 0), col_text(s, 2), col_text(s, 3),
                            col_int(s, 4),  col_text(s, 5), col_int(s, 6)};
          need(g.state == "active" || g.state == "consumed" || g.state == "revoked",
               "state: not active, consumed or revoked");
          out.grants.push_back(std::move(g));
        });
  // Replies stay on disk until replayed; a forgotten job's replay record is
  // read by a submit at once (ADR 0073).
  query("operations",
        "SELECT id, kind, digest, CASE kind WHEN 'submit' THEN result ELSE X'' END, at_ms "
        "FROM operations",
        [&](sqlite3_stmt* s) {
          auto blob = [&](int i) {
            auto p = static_cast<const char*>(sqlite3_column_blob(s, i));
            return std::string(p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(s, i)));
          };
          out.operations.push_back(
              {col_text(s, 0), col_text(s, 1), col_text(s, 2), blob(3), col_int(s, 4)});
        });
  query(
      "invites", "SELECT hash, node, expires_ms, used FROM invites WHERE used = 0",
      [&](sqlite3_stmt* s) {
        out.invites.push_back({col_text(s, 0), col_text(s, 1), col_int(s, 2), col_int(s, 3) != 0});
      });
  return out;
}

namespace {
/// Resets a prepared statement and its bindings when a read returns.
struct reset_on_exit {
  sqlite3_stmt* s;
  ~reset_on_exit() {
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
  }
};

/// Steps a read of one row: nullopt on the row; else not_found saying
/// `missing`, or internal naming `row` with SQLite's words.
std::optional<bus::error_info> step_row(sqlite3* db, sqlite3_stmt* s, const std::string& row,
                                        std::string missing) {
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW)
    return std::nullopt;
  if (rc == SQLITE_DONE)
    return bus::error_info{errc::not_found, std::move(missing)};
  return bus::error_info{errc::internal, fmt::format("{}: {}", row, sqlite3_errmsg(db))};
}
} // namespace

bus::result<store::payload> store::load_payload(std::uint64_t seq, const std::string& job) {
  auto s = st_->get_payload.s;
  put(s, 1, seq), put(s, 2, job);
  reset_on_exit guard{s};
  auto row = "jobs row " + job;
  if (auto e = step_row(db_, s, row, row + ": no such job"))
    return *e;
  try {
    payload p{col_strings(s, 0), col_env(s, 1)};
    // An array's tasks share one stored environment; each task's own
    // variables come from its record.
    auto j = decode_job_record(col_view(s, 2), job, col_view(s, 3), col_int(s, 4), col_text(s, 5));
    if (!j.array.empty()) {
      p.env["CQ_ARRAY_ID"] = j.array;
      if (j.array_index)
        p.env["CQ_ARRAY_INDEX"] = std::to_string(*j.array_index);
    }
    return p;
  } catch (const std::exception& e) {
    return bus::error_info{errc::internal, fmt::format("{}: {}", row, e.what())};
  }
}

bus::result<std::string> store::operation_result(const std::string& id) {
  auto s = st_->get_operation.s;
  put(s, 1, id);
  reset_on_exit guard{s};
  if (auto e = step_row(db_, s, "operations row " + id, "operation " + id + ": expired"))
    return *e;
  return std::string(col_view(s, 0));
}

std::vector<std::string> store::check() {
  auto snap = load();
  auto out = std::move(snap.damaged);
  // No index keeps ids unique (schema v12, ADR 0046): a job row that
  // repeats an earlier row's id is damage. A restart finds it as it loads
  // the read model (api/recovery.cpp), at no extra cost; this names them all.
  {
    std::vector<std::pair<std::string_view, std::uint64_t>> ids; // id, seq
    ids.reserve(snap.jobs.size());
    for (auto& k : snap.jobs)
      ids.emplace_back(k.id, k.seq);
    std::sort(ids.begin(), ids.end());
    for (std::size_t i = 1; i < ids.size(); ++i)
      if (ids[i].first == ids[i - 1].first)
        out.push_back(fmt::format("jobs row {}: id: also the id of the job submitted as seq {}",
                                  ids[i].first, ids[i - 1].second));
  }
  // The environments, which load() leaves in the store.
  stmt s;
  check_rc(sqlite3_prepare_v2(db_,
                              "SELECT id, COALESCE(envs.env, jobs.env) FROM jobs LEFT JOIN envs "
                              "ON envs.digest = jobs.env_digest ORDER BY seq",
                              -1, &s.s, nullptr),
           "check env");
  while (sqlite3_step(s.s) == SQLITE_ROW) {
    try {
      (void)col_env(s.s, 1);
    } catch (const std::exception& e) {
      out.push_back(fmt::format("jobs row {}: env: {}", col_text(s.s, 0), e.what()));
    }
  }
  stmt ic;
  check_rc(sqlite3_prepare_v2(db_, "PRAGMA integrity_check", -1, &ic.s, nullptr),
           "integrity_check");
  while (sqlite3_step(ic.s) == SQLITE_ROW) {
    auto line = col_text(ic.s, 0);
    if (line != "ok")
      out.push_back("sqlite integrity_check: " + line);
  }
  return out;
}

void store::check_rc(int rc, const char* what) {
  check_sql(db_, rc, what);
}

} // namespace cq::coord
