#pragma once
// Packing the protocol's structs with msgpack-c's packer, for codec.cpp only
// (docs/adr/0042): a struct is a map of its fields() (an absent optional left
// out), its keys written as bytes the packer encoded once per type, into a
// string that is returned without a copy.
#include "cq/bus/protocol.hpp"
#include "cq/bus/wire_size.hpp"

#include <msgpack.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace cq::bus::packing {

/// msgpack's packer writes here, straight into the std::string that is
/// returned (an sbuffer would be copied into one: a listing's megabytes once
/// more). The packer writes a few bytes at a time (a listing: 150,000
/// times), so a write is a plain copy into room made ahead, not an append.
class string_buffer {
public:
  string_buffer() { grow(256); } // most frames: one allocation
  [[gnu::always_inline]] void write(const char* p, std::size_t n) {
    if (static_cast<std::size_t>(end_ - next_) < n)
      grow(n);
    std::memcpy(next_, p, n);
    next_ += n;
  }
  /// The bytes written (the buffer is spent). A small frame is copied to a
  /// string of its size: some are kept (an idempotency record's reply), and
  /// the buffer may be twice as large. A large one (a listing, sent and
  /// dropped) is handed over as it is.
  std::string take() {
    auto n = static_cast<std::size_t>(next_ - out_.data());
    if (n < (std::size_t{64} << 10))
      return std::string(out_.data(), n);
    out_.resize(n);
    return std::move(out_);
  }

private:
  /// Room for `n` more bytes at least: twice the size, or what is needed.
  [[gnu::noinline]] void grow(std::size_t n) {
    auto used = out_.empty() ? 0 : static_cast<std::size_t>(next_ - out_.data());
    out_.resize(std::max(out_.size() * 2, used + n));
    next_ = out_.data() + used;
    end_ = out_.data() + out_.size();
  }

  std::string out_;
  char* next_ = nullptr; ///< where the next byte goes
  char* end_ = nullptr;  ///< the end of the room made
};

/// msgpack's packer that also lets a struct's keys be written as bytes.
template <class Buffer>
struct packer_of : msgpack::packer<Buffer> {
  explicit packer_of(Buffer& b) : msgpack::packer<Buffer>(b), buffer(b) {}
  Buffer& buffer;
};
using packer = packer_of<string_buffer>;

using detail::is_optional; // wire_size.hpp
using detail::is_vector;

// ---- packing ----------------------------------------------------------------

template <class P, class T>
void pack_value(P& pk, const T& v);

/// T's field names as msgpack's packer encodes them, built once: a struct's
/// keys are then written as bytes, one write each (a listing has 100,000).
template <class T>
const std::vector<std::string>& packed_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> v;
    T probe{};
    fields(
        [&](std::string_view name, auto&) {
          string_buffer b;
          msgpack::packer<string_buffer> pk(b);
          pk.pack(name);
          v.push_back(b.take());
        },
        probe);
    return v;
  }();
  return keys;
}

template <class P, class T>
void pack_struct(P& pk, const T& v) {
  auto& x = const_cast<T&>(v);
  std::uint32_t n = 0;
  fields(
      [&](std::string_view, auto& field) {
        using F = std::decay_t<decltype(field)>;
        if constexpr (is_optional<F>::value)
          n += field.has_value() ? 1 : 0;
        else
          ++n;
      },
      x);
  pk.pack_map(n);
  auto* key = packed_keys<T>().data();
  fields(
      [&](std::string_view, auto& field) {
        using F = std::decay_t<decltype(field)>;
        const auto& k = *key++;
        if constexpr (is_optional<F>::value) {
          if (!field)
            return;
          pk.buffer.write(k.data(), k.size());
          pack_value(pk, *field);
        } else {
          pk.buffer.write(k.data(), k.size());
          pack_value(pk, field);
        }
      },
      x);
}

template <class P, class T>
void pack_value(P& pk, const T& v) {
  if constexpr (std::is_enum_v<T>) {
    pk.pack(std::string_view(to_string(v)));
  } else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool> ||
                       std::is_same_v<T, std::uint64_t> || std::is_same_v<T, std::int64_t>) {
    pk.pack(v);
  } else if constexpr (std::is_same_v<T, env_map>) {
    pk.pack_map(static_cast<std::uint32_t>(v.size()));
    for (auto& [k, val] : v)
      pk.pack(k), pk.pack(val);
  } else if constexpr (is_vector<T>::value) {
    pk.pack_array(static_cast<std::uint32_t>(v.size()));
    for (auto& item : v)
      pack_value(pk, item);
  } else {
    pack_struct(pk, v);
  }
}

} // namespace cq::bus::packing
