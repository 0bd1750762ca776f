#pragma once
// Encoding and bounded decoding of cq frames (see protocol.hpp for the schema).
//
// decode_frame() is the only entry point for bytes from the network. It never
// throws; every failure is an error_info with a stable errc and a message that
// names the offending field. Memory is bounded: the frame size is checked
// first and msgpack's unpack limits (limits::*) are always set.

#include "cq/bus/protocol.hpp"

#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace cq::bus {

/// A decoded envelope whose body is still undecoded (its type depends on the op).
struct frame {
  std::uint64_t id = 0;
  std::string op;
  std::string token;
  bool is_reply = false;            ///< op == "reply"
  bool ok = false;                  ///< for replies: true = body, false = error
  error_info error;                 ///< for failed replies
  std::shared_ptr<const void> body; ///< opaque parsed body (a msgpack object)
};

/// Parses an envelope. On failure `id_seen` holds the request id if one could be
/// read, so the caller can still address an error reply.
result<frame> decode_frame(std::string_view bytes, std::uint64_t& id_seen);
/// The same without a copy of `bytes`: the frame keeps `owner` instead, which
/// must keep `bytes` alive and unchanged (a received message, say).
result<frame> decode_frame(std::string_view bytes, std::shared_ptr<const void> owner,
                           std::uint64_t& id_seen);

/// Decodes the body of `f` as T (any struct of protocol.hpp). Explicitly
/// instantiated in codec.cpp for every message type.
template <class T>
result<T> decode_body(const frame& f);

/// Decodes the body of a request frame by its op.
result<coordinator_request> decode_coordinator_request(const frame& f);
result<node_order> decode_node_order(const frame& f);

template <class T>
std::string encode_request(std::uint64_t id, std::string_view token, const T& body);
template <class T>
std::string encode_reply(std::uint64_t id, const T& body);
std::string encode_error(std::uint64_t id, errc code, std::string_view message);
std::string encode_coordinator_request(std::uint64_t id, std::string_view token,
                                       const coordinator_request& body);
/// An order for a node as one frame (start, stop, yield, read_log, release, clear_fault).
std::string encode_node_order(std::uint64_t id, const node_order& body);

/// A message body alone, as msgpack: its canonical form (fields in schema
/// order), for digests of arguments and for stored results of operations.
template <class T>
std::string encode_body(const T& body);
/// The inverse of encode_body, bounded like decode_frame.
template <class T>
result<T> decode_body_bytes(std::string_view bytes);

/// A struct as a stored record (the coordinator's job rows): a msgpack map of
/// the fields, by their fields() names, whose values differ from a
/// default-constructed T's, leaving out the fields named in `skip` (kept in
/// columns of their own). decode_record() is its inverse: a field the record
/// does not hold keeps its default, so a field added to T later reads as its
/// default from every record written before; an unknown field is an error.
/// Bounded like decode_frame; never throws. Instantiated for job_info.
template <class T>
std::string encode_record(const T& x, std::span<const std::string_view> skip = {});
template <class T>
result<T> decode_record(std::string_view bytes);

/// The exact size of `spec` encoded on the wire (checked against limits::spec_bytes).
std::size_t encoded_size(const job_spec& spec);

/// argv and environments as stored (a msgpack array / map of byte strings):
/// any byte but NUL is kept exactly as the kernel sees it, which JSON cannot
/// do. The decoders are bounded like decode_frame and never throw; an error
/// says what is wrong with the bytes.
std::string encode_strings(const string_list& v);
std::string encode_env(const env_map& v);
result<string_list> decode_strings(std::string_view bytes);
result<env_map> decode_env(std::string_view bytes);

} // namespace cq::bus
