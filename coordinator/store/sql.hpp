#pragma once
// SQLite binding and column helpers of the store (store.cpp, queries.cpp):
// an implementation detail of coordinator/store/.

#include "cq/bus/codec.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cq::coord::sql {

struct stmt {
  sqlite3_stmt* s = nullptr;
  stmt() = default;
  stmt(const stmt&) = delete;
  stmt& operator=(const stmt&) = delete;
  ~stmt() { sqlite3_finalize(s); }
};

inline void check_sql(sqlite3* db, int rc, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
    throw std::runtime_error(fmt::format("sqlite: {}: {}", what, sqlite3_errmsg(db)));
}

/// Runs `sql` (one or more statements); throws std::runtime_error with SQLite's message.
inline void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw std::runtime_error(fmt::format("sqlite: {}", msg));
  }
}

/// The index of the named parameter `name` (":id") of `s`; throws when `s`
/// has none, so a statement and its binds cannot drift apart unnoticed.
inline int at(sqlite3_stmt* s, const char* name) {
  int i = sqlite3_bind_parameter_index(s, name);
  if (i == 0)
    throw std::runtime_error(fmt::format("sqlite: no parameter {} in {}", name, sqlite3_sql(s)));
  return i;
}

inline void put(sqlite3_stmt* s, int i, const std::string& v) {
  sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}
/// Bytes that need not be text (argv and env as msgpack).
inline void put_blob(sqlite3_stmt* s, int i, const std::string& v) {
  sqlite3_bind_blob(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}
inline void put(sqlite3_stmt* s, int i, std::int64_t v) {
  sqlite3_bind_int64(s, i, v);
}
inline void put(sqlite3_stmt* s, int i, std::uint64_t v) {
  sqlite3_bind_int64(s, i, static_cast<std::int64_t>(v));
}
inline void put(sqlite3_stmt* s, int i, bool v) {
  sqlite3_bind_int(s, i, v ? 1 : 0);
}
template <class T>
void put(sqlite3_stmt* s, int i, const std::optional<T>& v) {
  if (v)
    put(s, i, *v);
  else
    sqlite3_bind_null(s, i);
}

/// argv (a list) or env (a map) as stored: a msgpack BLOB, or JSON TEXT
/// written by an earlier version. Throws std::runtime_error naming what is wrong.
template <class T>
T col_bytes(sqlite3_stmt* s, int i) {
  auto p = static_cast<const char*>(sqlite3_column_blob(s, i));
  std::string_view bytes(p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(s, i)));
  constexpr bool is_map = std::is_same_v<T, bus::env_map>;
  if (sqlite3_column_type(s, i) == SQLITE_BLOB) {
    auto r = [&] {
      if constexpr (is_map)
        return bus::decode_env(bytes);
      else
        return bus::decode_strings(bytes);
    }();
    if (!r)
      throw std::runtime_error(r.error().message);
    return *r;
  }
  auto j = nlohmann::json::parse(bytes, nullptr, false);
  if (j.is_discarded() || (is_map ? !j.is_object() : !j.is_array()))
    throw std::runtime_error(is_map ? "not an object of strings (JSON)"
                                    : "not a list of strings (JSON)");
  T out;
  for (auto& [k, v] : j.items()) {
    if (!v.is_string())
      throw std::runtime_error("a value is not a string (JSON)");
    if constexpr (is_map)
      out.emplace(k, v.template get<std::string>());
    else
      out.push_back(v.template get<std::string>());
  }
  return out;
}

inline bus::string_list col_strings(sqlite3_stmt* s, int i) {
  return col_bytes<bus::string_list>(s, i);
}
inline bus::env_map col_env(sqlite3_stmt* s, int i) {
  return col_bytes<bus::env_map>(s, i);
}

/// A JSON list of strings or numbers written by this store; throws when damaged.
template <class T>
std::vector<T> col_json_list(sqlite3_stmt* s, int i, const char* what) {
  auto p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  if (p && std::string_view(p) == "[]")
    return {}; // most rows (no dependencies, no lanes): no parser to run
  auto j = nlohmann::json::parse(p ? p : "", nullptr, false);
  if (j.is_discarded() || !j.is_array())
    throw std::runtime_error(fmt::format("{}: not a JSON list", what));
  try {
    return j.get<std::vector<T>>();
  } catch (const std::exception&) {
    throw std::runtime_error(fmt::format("{}: a JSON list of the wrong type", what));
  }
}

inline std::string col_text(sqlite3_stmt* s, int i) {
  auto p = sqlite3_column_text(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         static_cast<std::size_t>(sqlite3_column_bytes(s, i)))
           : std::string();
}
/// A column's bytes, valid until the statement steps again.
inline std::string_view col_view(sqlite3_stmt* s, int i) {
  auto p = static_cast<const char*>(sqlite3_column_blob(s, i));
  return {p ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(s, i))};
}
inline std::int64_t col_int(sqlite3_stmt* s, int i) {
  return sqlite3_column_int64(s, i);
}
inline std::optional<std::int64_t> col_opt_int(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL)
    return std::nullopt;
  return sqlite3_column_int64(s, i);
}
inline std::optional<std::uint64_t> col_opt_u64(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL)
    return std::nullopt;
  return static_cast<std::uint64_t>(sqlite3_column_int64(s, i));
}

/// A struct stored as one row whose columns are its fields (fields(), in
/// bus/schema.hpp), by name: the statements' text and each bind and read come
/// from fields(), so a field added to the struct needs only its column
/// (a migration in schema.cpp). A column holds a string, an integer, a bool,
/// an enum by its name (to_string and bus::parse), an optional of those
/// (NULL when absent), or a list of strings (JSON text).
namespace row_columns {

template <class T>
std::vector<std::string_view> names() {
  T x{};
  std::vector<std::string_view> out;
  fields([&](std::string_view name, auto&) { out.push_back(name); }, x);
  return out;
}

/// "INSERT INTO table(a, b, ...) VALUES(?,?, ...) ON CONFLICT(key) DO UPDATE SET
/// b = excluded.b, ...": a row written again replaces the one with its key.
template <class T>
std::string upsert(std::string_view table, std::string_view key) {
  auto cols = names<T>();
  std::string list, marks, set;
  for (auto c : cols) {
    list += fmt::format("{}{}", list.empty() ? "" : ", ", c);
    marks += marks.empty() ? "?" : ",?";
    if (c != key)
      set += fmt::format("{}{} = excluded.{}", set.empty() ? "" : ", ", c, c);
  }
  return fmt::format("INSERT INTO {}({}) VALUES({}) ON CONFLICT({}) DO UPDATE SET {}", table, list,
                     marks, key, set);
}

/// "SELECT a, b, ... FROM table " followed by `tail`.
template <class T>
std::string select(std::string_view table, std::string_view tail) {
  std::string list;
  for (auto c : names<T>())
    list += fmt::format("{}{}", list.empty() ? "" : ", ", c);
  return fmt::format("SELECT {} FROM {} {}", list, table, tail);
}

template <class V>
void bind_value(sqlite3_stmt* s, int i, const V& v) {
  if constexpr (std::is_same_v<V, bus::string_list>)
    put(s, i, nlohmann::json(v).dump());
  else if constexpr (std::is_enum_v<V>)
    put(s, i, std::string(to_string(v)));
  else if constexpr (requires { v.has_value(); }) {
    if (v)
      bind_value(s, i, *v);
    else
      sqlite3_bind_null(s, i);
  } else
    put(s, i, v);
}

template <class V>
void read_value(sqlite3_stmt* s, int i, V& v, std::string_view name) {
  if constexpr (std::is_same_v<V, bus::string_list>) {
    v = col_json_list<std::string>(s, i, std::string(name).c_str());
  } else if constexpr (std::is_enum_v<V>) {
    if (!bus::parse(col_text(s, i), v))
      throw std::runtime_error(
          fmt::format("{}: '{}' is not one of its names", name, col_text(s, i)));
  } else if constexpr (requires { v.has_value(); }) {
    if (sqlite3_column_type(s, i) == SQLITE_NULL)
      v.reset();
    else
      read_value(s, i, v.emplace(), name);
  } else if constexpr (std::is_same_v<V, std::string>) {
    v = col_text(s, i);
  } else if constexpr (std::is_same_v<V, bool>) {
    v = col_int(s, i) != 0;
  } else {
    v = static_cast<V>(col_int(s, i));
  }
}

/// Binds `row`'s fields to the parameters of a statement made by upsert<T>.
template <class T>
void bind(sqlite3_stmt* s, const T& row) {
  int i = 1;
  fields([&](std::string_view, auto& v) { bind_value(s, i++, v); }, const_cast<T&>(row));
}

/// A row of a statement made by select<T>; throws std::runtime_error naming
/// the column that does not read as its field.
template <class T>
T read(sqlite3_stmt* s) {
  T row{};
  int i = 0;
  fields([&](std::string_view name, auto& v) { read_value(s, i++, v, name); }, row);
  return row;
}

} // namespace row_columns

} // namespace cq::coord::sql
