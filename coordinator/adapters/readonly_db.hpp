#pragma once
// A read-only connection to the coordinator's state database, for threads
// that are not the store actor's (the status server's token checks, the
// notifier's event reads). SQLite's WAL mode lets such a reader run beside
// the store's writer without ever blocking a commit; each query here is a
// short read transaction of its own. Not thread-safe: one per thread, or a
// lock around it.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

struct sqlite3;

namespace cq::coord {

class readonly_db {
public:
  /// A column's value: NULL, an integer, or text/blob bytes.
  using value = std::variant<std::monostate, std::int64_t, std::string>;
  using row = std::vector<value>;

  explicit readonly_db(std::string path) : path_(std::move(path)) {}
  ~readonly_db();
  readonly_db(const readonly_db&) = delete;
  readonly_db& operator=(const readonly_db&) = delete;

  /// Runs `sql` with `args` bound in order, calling `each` for every row.
  /// Opens the file on first use (and again after an error). Returns the
  /// error, or nullopt.
  std::optional<std::string> query(const std::string& sql, const std::vector<value>& args,
                                   const std::function<void(const row&)>& each);

private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

/// The integer in `v` (0 when it holds none).
inline std::int64_t as_int(const readonly_db::value& v) {
  auto* i = std::get_if<std::int64_t>(&v);
  return i ? *i : 0;
}
/// The text in `v` ("" when it holds none).
inline std::string as_text(const readonly_db::value& v) {
  auto* s = std::get_if<std::string>(&v);
  return s ? *s : std::string();
}

} // namespace cq::coord
