#pragma once
// Upper bounds of the wire size of protocol structs, computed from their
// fields without encoding them (no msgpack here). Used to fill pages of a
// listing up to limits::page_bytes.

#include "cq/bus/protocol.hpp"

#include <cstddef>
#include <type_traits>

namespace cq::bus {

namespace detail {
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
} // namespace detail

/// An upper bound of the msgpack encoding of `x` (a protocol struct, string,
/// number, bool, vector or map of those): every string counts its bytes plus
/// a 5-byte header, every number 9 bytes, every container a 5-byte header.
template <class T>
std::size_t wire_size_bound(const T& x) {
  if constexpr (std::is_enum_v<T>) {
    return 5 + to_string(x).size();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return 5 + x.size();
  } else if constexpr (std::is_same_v<T, bool>) {
    return 1;
  } else if constexpr (std::is_integral_v<T>) {
    return 9;
  } else if constexpr (std::is_same_v<T, env_map>) {
    std::size_t n = 5;
    for (auto& [k, v] : x)
      n += 10 + k.size() + v.size();
    return n;
  } else if constexpr (detail::is_optional<T>::value) {
    return x ? wire_size_bound(*x) : 1;
  } else if constexpr (detail::is_vector<T>::value) {
    std::size_t n = 5;
    for (auto& item : x)
      n += wire_size_bound(item);
    return n;
  } else {
    std::size_t n = 5;
    fields(
        [&](std::string_view name, auto& field) { n += 5 + name.size() + wire_size_bound(field); },
        const_cast<T&>(x));
    return n;
  }
}

} // namespace cq::bus
