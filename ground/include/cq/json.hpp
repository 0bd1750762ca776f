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

#include <map>
#include <optional>
#include <string>
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

} // namespace cq
