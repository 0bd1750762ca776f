#include "adapters/readonly_db.hpp"

#include <sqlite3.h>

namespace cq::coord {

readonly_db::~readonly_db() {
  if (db_)
    sqlite3_close(db_);
}

std::optional<std::string> readonly_db::query(const std::string& sql,
                                              const std::vector<value>& args,
                                              const std::function<void(const row&)>& each) {
  if (!db_) {
    if (sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) !=
        SQLITE_OK) {
      std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      db_ = nullptr;
      return "cannot open " + path_ + ": " + why;
    }
    sqlite3_busy_timeout(db_, 2000);
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    std::string why = sqlite3_errmsg(db_);
    sqlite3_close(db_); // opened again next time (the schema may be new)
    db_ = nullptr;
    return why;
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto k = static_cast<int>(i + 1);
    if (auto* n = std::get_if<std::int64_t>(&args[i]))
      sqlite3_bind_int64(st, k, *n);
    else if (auto* s = std::get_if<std::string>(&args[i]))
      sqlite3_bind_text(st, k, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
    else
      sqlite3_bind_null(st, k);
  }
  int rc;
  row r;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    auto n = sqlite3_column_count(st);
    r.assign(static_cast<std::size_t>(n), value{});
    for (int c = 0; c < n; ++c) {
      auto t = sqlite3_column_type(st, c);
      if (t == SQLITE_INTEGER)
        r[static_cast<std::size_t>(c)] = static_cast<std::int64_t>(sqlite3_column_int64(st, c));
      else if (t != SQLITE_NULL) {
        auto* p = static_cast<const char*>(sqlite3_column_blob(st, c));
        r[static_cast<std::size_t>(c)] =
            std::string(p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(st, c)));
      }
    }
    each(r);
  }
  std::optional<std::string> out;
  if (rc != SQLITE_DONE)
    out = sqlite3_errmsg(db_);
  sqlite3_finalize(st);
  return out;
}

} // namespace cq::coord
