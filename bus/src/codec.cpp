#include "cq/bus/codec.hpp"
#include "cq/bus/wire_size.hpp"
#include "packing.hpp"

#include <fmt/format.h>
#include <msgpack.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <type_traits>
#include <vector>

namespace cq::bus {
namespace {

using namespace packing; // packing.hpp

// ---- unpacking --------------------------------------------------------------

/// Where a value sits in the message ("jobs[3].name"): a chain of segments
/// on the decoder's stack. Its text is built only when an error names it,
/// not for every field and element decoded.
struct where {
  const where* parent = nullptr;
  std::string_view name; ///< a field name or map key (the root's own path)
  std::size_t index = 0;
  bool is_index = false;

  where(std::string_view root) : name(root) {}   // NOLINT: a path as given
  where(const std::string& root) : name(root) {} // NOLINT
  where(const char* root) : name(root) {}        // NOLINT
  where(const where* p, std::string_view n) : parent(p), name(n) {}
  where(const where* p, std::size_t i) : parent(p), index(i), is_index(true) {}

  std::string str() const {
    std::string base = parent ? parent->str() : std::string();
    if (is_index)
      return fmt::format("{}[{}]", base, index);
    if (name.empty())
      return base;
    return base.empty() ? std::string(name) : base + "." + std::string(name);
  }
};

struct decoder {
  error_info err;
  bool failed = false;
  /// A stored record (decode_record): a missing field keeps its default.
  bool missing_is_default = false;

  bool fail(const where& path, std::string_view what) {
    if (!failed) {
      failed = true;
      auto at = path.str();
      err = {errc::malformed, fmt::format("{}: {}", at.empty() ? "body" : at, what)};
    }
    return false;
  }

  template <class T>
  bool read(const msgpack::object& o, T& out, const where& path) {
    if constexpr (std::is_enum_v<T>) {
      std::string name;
      if (!read(o, name, path))
        return false;
      if (!parse(name, out))
        return fail(path, fmt::format("unknown value '{}'", name.substr(0, 64)));
      return true;
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (o.type != msgpack::type::STR && o.type != msgpack::type::BIN)
        return fail(path, "expected a string");
      out.assign(o.via.str.ptr, o.via.str.size);
      return true;
    } else if constexpr (std::is_same_v<T, bool>) {
      if (o.type != msgpack::type::BOOLEAN)
        return fail(path, "expected a boolean");
      out = o.via.boolean;
      return true;
    } else if constexpr (std::is_same_v<T, std::uint64_t>) {
      if (o.type != msgpack::type::POSITIVE_INTEGER)
        return fail(path, "expected a non-negative integer");
      out = o.via.u64;
      return true;
    } else if constexpr (std::is_same_v<T, std::int64_t>) {
      if (o.type == msgpack::type::NEGATIVE_INTEGER) {
        out = o.via.i64;
        return true;
      }
      if (o.type != msgpack::type::POSITIVE_INTEGER || o.via.u64 > INT64_MAX)
        return fail(path, "expected an integer");
      out = static_cast<std::int64_t>(o.via.u64);
      return true;
    } else if constexpr (std::is_same_v<T, env_map>) {
      if (o.type != msgpack::type::MAP)
        return fail(path, "expected a map");
      out.clear();
      for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
        std::string k, v;
        if (!read(o.via.map.ptr[i].key, k, where(&path, "<key>")))
          return false;
        if (!read(o.via.map.ptr[i].val, v, where(&path, k)))
          return false;
        // Encoders (ours) write a map's keys in order: at the end, each
        // insert costs no search. A repeated key keeps its first value.
        out.emplace_hint(out.end(), std::move(k), std::move(v));
      }
      return true;
    } else if constexpr (is_vector<T>::value) {
      if (o.type != msgpack::type::ARRAY)
        return fail(path, "expected an array");
      out.clear();
      out.resize(o.via.array.size);
      for (std::uint32_t i = 0; i < o.via.array.size; ++i)
        if (!read(o.via.array.ptr[i], out[i], where(&path, std::size_t{i})))
          return false;
      return true;
    } else {
      return read_struct(o, out, path);
    }
  }

  /// One field of a struct as the decoder reaches it: its name, where it
  /// is in the struct, and how its value is read (an optional's nil resets it).
  struct field_entry {
    std::string_view name; ///< a string literal (lives forever)
    std::size_t offset = 0;
    bool (*read)(decoder&, const msgpack::object&, void*, const where&) = nullptr;
  };
  template <class T>
  struct table {
    std::vector<field_entry> fields; ///< in fields() order
    std::uint64_t required = 0;      ///< bit i: field i is not optional
  };

  /// T's fields, built once from fields() (at most 64: `seen` is a bit set).
  template <class T>
  static const table<T>& table_of() {
    static const table<T> t = [] {
      table<T> out;
      T probe{};
      auto* base = reinterpret_cast<const char*>(&probe);
      fields(
          [&](std::string_view name, auto& field) {
            using F = std::decay_t<decltype(field)>;
            if (!is_optional<F>::value)
              out.required |= 1ull << out.fields.size();
            out.fields.push_back(
                {name, static_cast<std::size_t>(reinterpret_cast<const char*>(&field) - base),
                 [](decoder& d, const msgpack::object& o, void* p, const where& w) {
                   return d.take(o, *static_cast<F*>(p), w);
                 }});
          },
          probe);
      if (out.fields.size() > 64)
        std::abort();
      return out;
    }();
    return t;
  }

  /// A field's value: an optional is reset by nil, else read in place (a
  /// value that fails to read leaves it absent).
  template <class F>
  bool take(const msgpack::object& o, F& field, const where& path) {
    if constexpr (is_optional<F>::value) {
      if (o.type == msgpack::type::NIL) {
        field.reset();
        return true;
      }
      field.emplace();
      if (read(o, *field, path))
        return true;
      field.reset();
      return false;
    } else {
      return read(o, field, path);
    }
  }

  template <class T>
  bool read_struct(const msgpack::object& o, T& out, const where& path) {
    if (o.type != msgpack::type::MAP)
      return fail(path, "expected a map");
    auto& t = table_of<T>();
    auto n = t.fields.size();
    auto* base = reinterpret_cast<char*>(&out);
    std::uint64_t seen = 0;
    // cq's encoders write the keys in fields() order: the field after the
    // last one found is tried first.
    std::size_t hint = 0;
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
      auto& kv = o.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR)
        return fail(path, "expected string keys");
      std::string_view key(kv.key.via.str.ptr, kv.key.via.str.size);
      std::size_t found = n;
      for (std::size_t k = 0; k < n; ++k) {
        auto j = hint + k < n ? hint + k : hint + k - n;
        if (t.fields[j].name == key) {
          found = j;
          break;
        }
      }
      if (found == n)
        return fail(where(&path, key), "unknown field");
      auto& f = t.fields[found];
      if (seen & (1ull << found))
        return fail(where(&path, f.name), "duplicate key");
      seen |= 1ull << found;
      hint = found + 1 < n ? found + 1 : 0;
      if (!f.read(*this, kv.val, base + f.offset, where(&path, f.name)))
        return false;
    }
    if (auto missing = t.required & ~seen; missing && !missing_is_default)
      return fail(where(&path, t.fields[static_cast<std::size_t>(std::countr_zero(missing))].name),
                  "missing required field");
    return !failed;
  }
};

/// A decoded envelope: the frame's bytes (its own copy, or kept alive by
/// `owner`) and the object tree over them. Strings in the tree point into the
/// bytes rather than each being copied into the tree's zone.
struct parsed {
  std::string bytes;
  std::shared_ptr<const void> owner;
  msgpack::object_handle handle;
  const msgpack::object* body = nullptr;
};

const msgpack::object* find_key(const msgpack::object& map, std::string_view key) {
  for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
    auto& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR &&
        std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key)
      return &kv.val;
  }
  return nullptr;
}

template <class T>
std::string finish_envelope(std::uint64_t id, std::string_view op, std::string_view token,
                            const T* body, const error_info* err) {
  string_buffer buf;
  packer pk(buf);
  bool reply = op == "reply";
  pk.pack_map(reply ? 5 : 5);
  pk.pack(std::string_view("v")), pk.pack(protocol_version);
  pk.pack(std::string_view("id")), pk.pack(id);
  pk.pack(std::string_view("op")), pk.pack(op);
  if (reply) {
    pk.pack(std::string_view("ok")), pk.pack(err == nullptr);
    if (err) {
      pk.pack(std::string_view("error"));
      pk.pack_map(2);
      pk.pack(std::string_view("code")), pk.pack(static_cast<std::uint64_t>(err->code));
      pk.pack(std::string_view("message")), pk.pack(err->message);
    } else {
      pk.pack(std::string_view("body"));
      pack_value(pk, *body);
    }
  } else {
    pk.pack(std::string_view("token")), pk.pack(token);
    pk.pack(std::string_view("body"));
    pack_value(pk, *body);
  }
  return buf.take();
}

template <class Variant, std::size_t I = 0>
result<Variant> decode_by_op(const frame& f) {
  if constexpr (I == std::variant_size_v<Variant>) {
    return error_info{errc::unknown_op, fmt::format("unknown op '{}'", f.op)};
  } else {
    using T = std::variant_alternative_t<I, Variant>;
    if (f.op == T::op) {
      auto r = decode_body<T>(f);
      if (!r)
        return r.error();
      return Variant{std::move(*r)};
    }
    return decode_by_op<Variant, I + 1>(f);
  }
}

} // namespace

result<frame> decode_frame(std::string_view bytes, std::uint64_t& id_seen) {
  return decode_frame(bytes, nullptr, id_seen);
}

result<frame> decode_frame(std::string_view bytes, std::shared_ptr<const void> owner,
                           std::uint64_t& id_seen) {
  id_seen = 0;
  if (bytes.size() > limits::frame_bytes)
    return error_info{errc::too_large, fmt::format("frame of {} bytes exceeds the limit of {}",
                                                   bytes.size(), limits::frame_bytes)};
  auto p = std::make_shared<parsed>();
  if (owner) {
    p->owner = std::move(owner);
  } else {
    p->bytes.assign(bytes);
    bytes = p->bytes;
  }
  try {
    std::size_t off = 0;
    auto reference = [](msgpack::type::object_type, std::size_t, void*) { return true; };
    p->handle = msgpack::unpack(bytes.data(), bytes.size(), off, reference, nullptr,
                                msgpack::unpack_limit(limits::array_items, limits::map_items,
                                                      limits::string_bytes, limits::string_bytes, 0,
                                                      limits::depth));
    if (off != bytes.size())
      return error_info{errc::malformed, "trailing bytes after the frame"};
  } catch (const msgpack::depth_size_overflow&) {
    return error_info{errc::malformed, "frame is nested too deeply"};
  } catch (const msgpack::size_overflow& e) {
    return error_info{errc::too_large, fmt::format("frame exceeds a size limit: {}", e.what())};
  } catch (const std::exception& e) {
    return error_info{errc::malformed, fmt::format("frame is not valid msgpack: {}", e.what())};
  }
  const msgpack::object& o = p->handle.get();
  if (o.type != msgpack::type::MAP)
    return error_info{errc::malformed, "frame is not a map"};
  if (auto* id = find_key(o, "id"); id && id->type == msgpack::type::POSITIVE_INTEGER)
    id_seen = id->via.u64;
  frame f;
  decoder d;
  std::uint64_t version = 0;
  auto* v = find_key(o, "v");
  if (!v || !d.read(*v, version, "v"))
    return error_info{errc::malformed, "v: missing or not an integer"};
  if (version != protocol_version)
    return error_info{
        errc::unsupported_version,
        fmt::format("protocol version {} is not supported (want {})", version, protocol_version)};
  auto* id = find_key(o, "id");
  if (!id || !d.read(*id, f.id, "id"))
    return error_info{errc::malformed, "id: missing or not an integer"};
  auto* op = find_key(o, "op");
  if (!op || !d.read(*op, f.op, "op"))
    return error_info{errc::malformed, "op: missing or not a string"};
  if (f.op.size() > 64)
    return error_info{errc::malformed, "op: too long"};
  f.is_reply = f.op == "reply";
  std::size_t known = 3;
  if (f.is_reply) {
    auto* ok = find_key(o, "ok");
    if (!ok || !d.read(*ok, f.ok, "ok"))
      return error_info{errc::malformed, "ok: missing or not a boolean"};
    ++known;
    if (f.ok) {
      p->body = find_key(o, "body");
      if (!p->body)
        return error_info{errc::malformed, "body: missing"};
    } else {
      auto* e = find_key(o, "error");
      std::uint64_t code = 0;
      const msgpack::object* c =
          e && e->type == msgpack::type::MAP ? find_key(*e, "code") : nullptr;
      const msgpack::object* m =
          e && e->type == msgpack::type::MAP ? find_key(*e, "message") : nullptr;
      if (!c || !m || !d.read(*c, code, "error.code") ||
          !d.read(*m, f.error.message, "error.message"))
        return error_info{errc::malformed, "error: missing or malformed"};
      f.error.code = is_errc(code) ? static_cast<errc>(code) : errc::internal;
    }
    ++known;
  } else {
    auto* t = find_key(o, "token");
    if (t) {
      if (!d.read(*t, f.token, "token"))
        return error_info{errc::malformed, "token: not a string"};
      if (f.token.size() > 256)
        return error_info{errc::malformed, "token: too long"};
      ++known;
    }
    p->body = find_key(o, "body");
    if (!p->body)
      return error_info{errc::malformed, "body: missing"};
    ++known;
  }
  if (o.via.map.size != known)
    return error_info{errc::malformed, "envelope has unknown or duplicate keys"};
  f.body = std::shared_ptr<const void>(p, p->body);
  return f;
}

template <class T>
result<T> decode_body(const frame& f) {
  auto* o = static_cast<const msgpack::object*>(f.body.get());
  if (!o)
    return error_info{errc::malformed, "body: missing"};
  T out{};
  decoder d;
  if (!d.read_struct(*o, out, ""))
    return d.err;
  return out;
}

result<coordinator_request> decode_coordinator_request(const frame& f) {
  return decode_by_op<coordinator_request>(f);
}

result<node_order> decode_node_order(const frame& f) {
  return decode_by_op<node_order>(f);
}

template <class T>
std::string encode_request(std::uint64_t id, std::string_view token, const T& body) {
  return finish_envelope<T>(id, T::op, token, &body, nullptr);
}

template <class T>
std::string encode_reply(std::uint64_t id, const T& body) {
  return finish_envelope<T>(id, "reply", "", &body, nullptr);
}

std::string encode_error(std::uint64_t id, errc code, std::string_view message) {
  error_info e{code, std::string(message)};
  return finish_envelope<empty_rep>(id, "reply", "", nullptr, &e);
}

std::string encode_coordinator_request(std::uint64_t id, std::string_view token,
                                       const coordinator_request& body) {
  return std::visit([&](auto& b) { return encode_request(id, token, b); }, body);
}

std::string encode_node_order(std::uint64_t id, const node_order& body) {
  return std::visit([&](auto& b) { return encode_request(id, "", b); }, body);
}

namespace {

/// Counts bytes instead of storing them (msgpack's packer needs only write()).
struct counting_buffer {
  std::size_t size = 0;
  void write(const char*, std::size_t n) { size += n; }
};

template <class T>
std::string pack_one(const T& v) {
  string_buffer buf;
  packer pk(buf);
  pack_value(pk, v);
  return buf.take();
}

template <class T>
result<T> unpack_one(std::string_view bytes, std::string_view what,
                     bool missing_is_default = false) {
  msgpack::object_handle h;
  try {
    std::size_t off = 0;
    // Strings stay in `bytes` (referenced, not copied into the zone): it
    // outlives the decode below, which copies what it keeps.
    auto reference = [](msgpack::type::object_type, std::size_t, void*) { return true; };
    h = msgpack::unpack(bytes.data(), bytes.size(), off, reference, nullptr,
                        msgpack::unpack_limit(limits::array_items, limits::map_items,
                                              limits::string_bytes, limits::string_bytes, 0,
                                              limits::depth));
    if (off != bytes.size())
      return error_info{errc::malformed, fmt::format("{}: trailing bytes", what)};
  } catch (const std::exception& e) {
    return error_info{errc::malformed, fmt::format("{}: not valid msgpack: {}", what, e.what())};
  }
  T out{};
  decoder d;
  d.missing_is_default = missing_is_default;
  if (!d.read(h.get(), out, std::string(what)))
    return d.err;
  return out;
}

} // namespace

std::size_t encoded_size(const job_spec& spec) {
  counting_buffer buf;
  packer_of<counting_buffer> pk(buf);
  pack_value(pk, spec);
  return buf.size;
}

std::string encode_strings(const string_list& v) {
  return pack_one(v);
}
std::string encode_env(const env_map& v) {
  return pack_one(v);
}
result<string_list> decode_strings(std::string_view bytes) {
  return unpack_one<string_list>(bytes, "strings");
}
result<env_map> decode_env(std::string_view bytes) {
  return unpack_one<env_map>(bytes, "env");
}

template <class T>
std::string encode_body(const T& body) {
  return pack_one(body);
}
template <class T>
result<T> decode_body_bytes(std::string_view bytes) {
  return unpack_one<T>(bytes, "body");
}

template <class T>
std::string encode_record(const T& x, std::span<const std::string_view> skip) {
  // The default of each field, in fields() order (built once): the same walk
  // over the same type visits the same field types in the same order.
  static const T defaults{};
  static const std::vector<const void*> def = [] {
    std::vector<const void*> v;
    fields([&](std::string_view, auto& f) { v.push_back(&f); }, const_cast<T&>(defaults));
    return v;
  }();
  auto& v = const_cast<T&>(x);
  std::vector<bool> keep;
  keep.reserve(def.size());
  std::uint32_t n = 0;
  fields(
      [&](std::string_view name, auto& f) {
        using F = std::decay_t<decltype(f)>;
        bool k = f != *static_cast<const F*>(def[keep.size()]) &&
                 std::find(skip.begin(), skip.end(), name) == skip.end();
        keep.push_back(k);
        n += k ? 1 : 0;
      },
      v);
  string_buffer buf;
  packer pk(buf);
  pk.pack_map(n);
  std::size_t i = 0;
  fields(
      [&](std::string_view name, auto& f) {
        using F = std::decay_t<decltype(f)>;
        if (!keep[i++])
          return;
        pk.pack(name);
        if constexpr (is_optional<F>::value) {
          if (f)
            pack_value(pk, *f);
          else
            pk.pack_nil(); // unset where the default is set
        } else
          pack_value(pk, f);
      },
      v);
  return buf.take();
}
template <class T>
result<T> decode_record(std::string_view bytes) {
  return unpack_one<T>(bytes, "record", true);
}
template std::string encode_record<job_info>(const job_info&, std::span<const std::string_view>);
template result<job_info> decode_record<job_info>(std::string_view);

#define CQ_REQUEST(T)                                                                              \
  template result<T> decode_body<T>(const frame&);                                                 \
  template std::string encode_request<T>(std::uint64_t, std::string_view, const T&);               \
  template std::string encode_body<T>(const T&);
#define CQ_REPLY(T)                                                                                \
  template result<T> decode_body<T>(const frame&);                                                 \
  template std::string encode_reply<T>(std::uint64_t, const T&);                                   \
  template std::string encode_body<T>(const T&);                                                   \
  template result<T> decode_body_bytes<T>(std::string_view);

CQ_REQUEST(submit_req)
CQ_REQUEST(ls_req)
CQ_REQUEST(show_req)
CQ_REQUEST(logs_req)
CQ_REQUEST(cancel_req)
CQ_REQUEST(move_req)
CQ_REQUEST(profile_ls_req)
CQ_REQUEST(profile_rm_req)
CQ_REQUEST(node_invite_req)
CQ_REQUEST(node_approve_req)
CQ_REQUEST(node_ls_req)
CQ_REQUEST(node_join_req)
CQ_REQUEST(heartbeat_req)
CQ_REQUEST(report_req)
CQ_REQUEST(start_order)
CQ_REQUEST(stop_order)
CQ_REQUEST(read_log_order)
CQ_REQUEST(yield_order)
CQ_REQUEST(release_order)
CQ_REQUEST(clear_fault_order)
CQ_REQUEST(forget_order)
CQ_REQUEST(release_req)
CQ_REQUEST(node_clear_fault_req)
CQ_REQUEST(preempt_req)
CQ_REQUEST(events_req)
template std::string encode_body<job_spec>(const job_spec&);
CQ_REQUEST(node_enable_req)
CQ_REQUEST(node_disable_req)
CQ_REQUEST(token_add_req)
CQ_REQUEST(token_ls_req)
CQ_REQUEST(whoami_req)
CQ_REQUEST(job_hold_req)
CQ_REQUEST(token_revoke_req)
CQ_REQUEST(audit_req)
CQ_REQUEST(node_diagnostic_req)
CQ_REQUEST(node_diagnostic_show_req)
CQ_REQUEST(terminal_req)
CQ_REQUEST(clean_req)
CQ_REQUEST(terminal_order)
CQ_REPLY(submit_rep)
CQ_REPLY(ls_rep)
CQ_REPLY(show_rep)
CQ_REPLY(logs_rep)
CQ_REPLY(cancel_rep)
CQ_REPLY(move_rep)
CQ_REPLY(profile_ls_rep)
CQ_REPLY(node_invite_rep)
CQ_REPLY(node_rep)
CQ_REPLY(node_ls_rep)
CQ_REPLY(node_join_rep)
CQ_REPLY(heartbeat_rep)
CQ_REPLY(report_rep)
CQ_REPLY(log_chunk)
CQ_REPLY(empty_rep)
CQ_REPLY(order_ack)
CQ_REPLY(preempt_rep)
CQ_REPLY(events_rep)
CQ_REPLY(token_add_rep)
CQ_REPLY(token_ls_rep)
CQ_REPLY(whoami_rep)
CQ_REPLY(audit_rep)
CQ_REPLY(grant_rep)
CQ_REPLY(terminal_rep)
CQ_REPLY(clean_rep)

} // namespace cq::bus
