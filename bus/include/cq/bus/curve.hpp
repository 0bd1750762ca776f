#pragma once
// CurveZMQ keys (SPEC section 6): the transport is encrypted whenever the
// coordinator binds anything but loopback. Keys are Z85 text (40
// characters), as ZeroMQ takes them. A key file holds the public key on its
// first line and the secret key on its second, and must be private (0600).
// No ZeroMQ in this header.

#include "cq/bus/schema.hpp"

#include <optional>
#include <string>

namespace cq::bus {

struct curve_keypair {
  std::string public_key; ///< Z85
  std::string secret_key; ///< Z85
};

/// What a connecting side (the CLI, a node) needs to speak CURVE.
struct client_curve {
  std::string server_key; ///< the coordinator's public key (Z85)
  curve_keypair own;      ///< this client's keypair (a node's is durable: it is its identity)
};

/// True when `key` looks like a Z85 CURVE key (40 characters of the alphabet).
bool is_z85_key(const std::string& key);

/// A fresh keypair (zmq_curve_keypair). Throws when ZeroMQ has no CURVE.
curve_keypair new_curve_keypair();

/// Reads the keypair at `path`, creating it (0600) when the file does not
/// exist. Fails when the file is open to group or others, or malformed.
result<curve_keypair> load_or_create_keypair(const std::string& path);

/// The invite code of SPEC section 6: one string that carries the one-time
/// secret, the coordinator's endpoint and, when it speaks CURVE, its public
/// key: `cqi_<secret>_<key or ->_<endpoint>`. A bare `cqi_<secret>` (no
/// endpoint) is still a valid code for `cq-node --join ENDPOINT CODE NAME`.
struct invite_code {
  std::string secret;     ///< cqi_<hex>: what the coordinator checks
  std::string server_key; ///< "" = plain (loopback)
  std::string endpoint;   ///< "" = not carried
};
std::string format_invite(const invite_code& c);
result<invite_code> parse_invite(const std::string& text);

} // namespace cq::bus
