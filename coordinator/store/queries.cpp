// The store's paged reads for readers (store.hpp): events and the audit log;
// and its small reads and writes of the meta and tokens tables.
#include "store.hpp"
#include "store/sql.hpp"

namespace cq::coord {
using namespace sql;

bus::result<bus::events_rep> store::events(const std::vector<std::uint64_t>& jobs,
                                           std::uint64_t cursor, std::uint64_t since,
                                           std::uint64_t limit) {
  bus::events_rep out;
  out.cursor = cursor;
  // Up to events_max_jobs ids: bound as parameters of one IN list.
  std::string sql = "SELECT id, job, seq, kind, at_ms, detail FROM events WHERE id > ? AND seq > ?";
  if (!jobs.empty()) {
    sql += " AND job_seq IN (";
    for (std::size_t i = 0; i < jobs.size(); ++i)
      sql += i ? ",?" : "?";
    sql += ")";
  }
  sql += " ORDER BY id LIMIT ?";
  stmt s;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s.s, nullptr) != SQLITE_OK)
    return bus::error_info{errc::internal, fmt::format("events: {}", sqlite3_errmsg(db_))};
  int i = 1;
  put(s.s, i++, cursor), put(s.s, i++, since);
  for (auto& j : jobs)
    put(s.s, i++, j);
  put(s.s, i, limit);
  int rc;
  while ((rc = sqlite3_step(s.s)) == SQLITE_ROW) {
    bus::event_info e;
    e.cursor = static_cast<std::uint64_t>(col_int(s.s, 0));
    e.job = col_text(s.s, 1);
    e.seq = static_cast<std::uint64_t>(col_int(s.s, 2));
    e.kind = col_text(s.s, 3);
    e.at_ms = col_int(s.s, 4);
    e.detail = col_text(s.s, 5);
    out.cursor = e.cursor;
    out.events.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE)
    return bus::error_info{errc::internal, fmt::format("events: {}", sqlite3_errmsg(db_))};
  // A page that is not full examined every event committed so far: the next
  // read starts after the newest, not after the last one it matched, so a
  // reader of a few jobs does not scan everyone else's events again on each
  // ask. (One connection: nothing commits between the two statements.)
  if (out.events.size() < limit) {
    stmt head;
    if (sqlite3_prepare_v2(db_, "SELECT max(id) FROM events", -1, &head.s, nullptr) != SQLITE_OK ||
        sqlite3_step(head.s) != SQLITE_ROW)
      return bus::error_info{errc::internal, fmt::format("events: {}", sqlite3_errmsg(db_))};
    out.cursor = std::max(out.cursor, static_cast<std::uint64_t>(col_int(head.s, 0)));
  }
  return out;
}

bus::result<bus::audit_rep> store::audit(const audit_query& f) {
  bus::audit_rep out;
  out.cursor = f.cursor;
  std::string sql = "SELECT id, at_ms, who, role, op, target, args, outcome FROM audit "
                    "WHERE id > ? AND at_ms >= ?";
  if (f.who)
    sql += " AND who = ?";
  if (f.op)
    sql += " AND op = ?";
  if (f.target)
    sql += " AND target = ?";
  sql += " ORDER BY id LIMIT ?";
  stmt s;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s.s, nullptr) != SQLITE_OK)
    return bus::error_info{errc::internal, fmt::format("audit: {}", sqlite3_errmsg(db_))};
  int i = 1;
  put(s.s, i++, f.cursor), put(s.s, i++, f.since_ms);
  for (auto* v : {&f.who, &f.op, &f.target})
    if (*v)
      put(s.s, i++, **v);
  put(s.s, i, f.limit);
  int rc;
  while ((rc = sqlite3_step(s.s)) == SQLITE_ROW) {
    bus::audit_info a;
    a.id = static_cast<std::uint64_t>(col_int(s.s, 0));
    a.at_ms = col_int(s.s, 1);
    a.who = col_text(s.s, 2), a.role = col_text(s.s, 3), a.op = col_text(s.s, 4);
    a.target = col_text(s.s, 5), a.args = col_text(s.s, 6), a.outcome = col_text(s.s, 7);
    out.cursor = a.id;
    out.rows.push_back(std::move(a));
  }
  if (rc != SQLITE_DONE)
    return bus::error_info{errc::internal, fmt::format("audit: {}", sqlite3_errmsg(db_))};
  return out;
}

std::optional<std::string> store::state_id() {
  stmt s;
  check_rc(
      sqlite3_prepare_v2(db_, "SELECT value FROM meta WHERE key = 'state_id'", -1, &s.s, nullptr),
      "state_id");
  if (sqlite3_step(s.s) == SQLITE_ROW)
    return col_text(s.s, 0);
  return std::nullopt;
}

void store::set_state_id(const std::string& id) {
  stmt s;
  check_rc(sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES('state_id', ?)",
                              -1, &s.s, nullptr),
           "set_state_id");
  put(s.s, 1, id);
  if (sqlite3_step(s.s) != SQLITE_DONE)
    throw std::runtime_error(
        fmt::format("sqlite: cannot store the state id: {}", sqlite3_errmsg(db_)));
}

bool store::has_owner() {
  stmt s;
  check_sql(db_,
            sqlite3_prepare_v2(db_, "SELECT 1 FROM tokens WHERE role = 'owner' LIMIT 1", -1, &s.s,
                               nullptr),
            "has_owner");
  return sqlite3_step(s.s) == SQLITE_ROW;
}

} // namespace cq::coord
