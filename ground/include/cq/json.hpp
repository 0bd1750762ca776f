#pragma once
// `--json` output and the board file: any struct with a fields() list (the
// wire's, cq/bus/protocol.hpp) converted to JSON by walking that list, so the
// JSON names are exactly the wire's names and stay stable when the protocol
// grows (a new field appears without CLI changes).
//
// Mapping: strings, booleans and integers as themselves; std::optional as its
// value or null when absent (the key is always present); vectors as arrays;
// string maps as objects; nested protocol structs as objects; errc as its name.

#include "cq/errc.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace cq {

template <class T>
nlohmann::ordered_json to_json(const T& x);

namespace json_detail {

template <class T>
inline constexpr bool is_optional_v = false;
template <class T>
inline constexpr bool is_optional_v<std::optional<T>> = true;

template <class T>
inline constexpr bool is_vector_v = false;
template <class T, class A>
inline constexpr bool is_vector_v<std::vector<T, A>> = true;

template <class T>
inline constexpr bool is_map_v = false;
template <class K, class V, class C, class A>
inline constexpr bool is_map_v<std::map<K, V, C, A>> = true;

template <class T>
nlohmann::ordered_json value_to_json(const T& v) {
  if constexpr (is_optional_v<T>) {
    if (!v)
      return nullptr;
    return value_to_json(*v);
  } else if constexpr (is_vector_v<T>) {
    auto out = nlohmann::ordered_json::array();
    for (const auto& e : v)
      out.push_back(value_to_json(e));
    return out;
  } else if constexpr (is_map_v<T>) {
    auto out = nlohmann::ordered_json::object();
    for (const auto& [k, e] : v)
      out[k] = value_to_json(e);
    return out;
  } else if constexpr (std::is_same_v<T, errc> || std::is_enum_v<T>) {
    return std::string(to_string(v));
  } else if constexpr (std::is_same_v<T, std::string> || std::is_arithmetic_v<T>) {
    return v;
  } else {
    return to_json(v);
  }
}

} // namespace json_detail

template <class T>
nlohmann::ordered_json to_json(const T& x) {
  auto out = nlohmann::ordered_json::object();
  // fields() takes a mutable reference because the decoder fills structs
  // through it; this visitor only reads.
  fields([&out](const char* name, const auto& v) { out[name] = json_detail::value_to_json(v); },
         const_cast<T&>(x));
  return out;
}

/// Serializes `j` on one line. Strings that are not valid UTF-8 (argv, env and
/// log data are bytes) get U+FFFD for the bad bytes instead of failing.
std::string dump_json(const nlohmann::ordered_json& j);

template <class T>
void append_json(std::string& out, const T& x);

namespace json_detail {

/// Appends `s` as a JSON string, exactly as dump_json writes it: printable
/// ASCII as it is, anything else through nlohmann's escaping.
void append_string(std::string& out, std::string_view s);
/// Appends an unsigned or signed integer.
void append_number(std::string& out, std::uint64_t v);
void append_number(std::string& out, std::int64_t v);

template <class T>
void append_value(std::string& out, const T& v) {
  if constexpr (is_optional_v<T>) {
    if (!v)
      out += "null";
    else
      append_value(out, *v);
  } else if constexpr (is_vector_v<T>) {
    out += '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i)
        out += ',';
      append_value(out, v[i]);
    }
    out += ']';
  } else if constexpr (is_map_v<T>) {
    out += '{';
    bool first = true;
    for (const auto& [k, e] : v) {
      if (!first)
        out += ',';
      first = false;
      append_string(out, k);
      out += ':';
      append_value(out, e);
    }
    out += '}';
  } else if constexpr (std::is_same_v<T, errc> || std::is_enum_v<T>) {
    append_string(out, to_string(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    out += v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    append_string(out, v);
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    append_number(out, static_cast<std::uint64_t>(v));
  } else if constexpr (std::is_integral_v<T>) {
    append_number(out, static_cast<std::int64_t>(v));
  } else if constexpr (std::is_arithmetic_v<T>) {
    out += dump_json(v); // floating point: nlohmann's own form
  } else {
    append_json(out, v);
  }
}

} // namespace json_detail

/// Appends what dump_json(to_json(x)) returns, written as it walks `x`'s
/// fields() (no document is built: a listing of 10,000 jobs is one pass).
template <class T>
void append_json(std::string& out, const T& x) {
  out += '{';
  bool first = true;
  fields(
      [&](const char* name, const auto& v) {
        if (!first)
          out += ',';
        first = false;
        json_detail::append_string(out, name);
        out += ':';
        json_detail::append_value(out, v);
      },
      const_cast<T&>(x));
  out += '}';
}

/// dump_json(to_json(x)), without the document.
template <class T>
std::string json_text(const T& x) {
  std::string out;
  append_json(out, x);
  return out;
}

} // namespace cq
