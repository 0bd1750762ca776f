#pragma once
// Where `cq` finds its coordinator and its identity (SPEC section 7).
//
//  - config dir: $CQ_CONFIG_DIR if set and non-empty, else $HOME/.config/cq.
//  - endpoint:   $CQ_URL, else the first line of <config dir>/url, else
//                tcp://127.0.0.1:7800.
//  - token:      the first line of <config dir>/token, trimmed; the file must
//                be a regular file that only its owner can access (0600 or
//                0400). There is no fallback: a separate identity
//                (CQ_CONFIG_DIR) whose token is missing fails instead of
//                silently using another one.
//  - timeout:    per call, 10 s, or $CQ_TIMEOUT_MS.
//  - server key: $CQ_SERVER_KEY, else <config dir>/server.key: the calls are
//                then encrypted with CurveZMQ (an ephemeral client keypair).
//  - local:      without $CQ_URL, <config dir>/local may name the same
//                coordinator's Unix socket: line 1 `unix://PATH` (or
//                `ipc://PATH`, as earlier versions wrote it), line 2 the
//                endpoint it stands for. When line 2 is the endpoint above,
//                cq tries the socket first (cq up writes it; docs/adr/0032
//                and 0047).

#include "cq/bus/protocol.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace cq::cli {

inline constexpr std::string_view default_endpoint = "tcp://127.0.0.1:7800";
inline constexpr std::chrono::milliseconds default_call_timeout{10000};

struct cli_config {
  std::string config_dir; ///< absolute or as given in CQ_CONFIG_DIR
  std::string endpoint;   ///< ZeroMQ endpoint of the coordinator
  /// Where `endpoint` came from, for a person, after "the address": "comes
  /// from CQ_URL", "comes from <the url file>" or "is the default (...)".
  std::string endpoint_from;
  std::chrono::milliseconds timeout{default_call_timeout}; ///< per call
  /// The coordinator's CURVE public key: $CQ_SERVER_KEY, else the first line
  /// of <config dir>/server.key (written by cq login --server-key); "" = plain.
  std::string server_key;
  /// The endpoint's Unix socket on this machine (unix://PATH), "" = none.
  std::string local_endpoint;
};

/// Reads the environment and <config dir>/url. Fails with invalid_argument if
/// CQ_TIMEOUT_MS is not a positive integer, or internal if no config dir can be
/// derived (neither CQ_CONFIG_DIR nor HOME nor a passwd entry).
bus::result<cli_config> load_config();

/// The text of <config dir>/local for the Unix socket at `socket_path`,
/// standing for `endpoint` (load_config() reads it back).
std::string local_record(const std::string& socket_path, const std::string& endpoint);

/// The config dir alone (same rules as load_config()).
bus::result<std::string> config_dir();

/// Path of the token file in `config_dir`.
std::string token_path(const std::string& config_dir);

/// The most of a token file that read_token() reads; its first line must end
/// within it.
inline constexpr std::size_t max_token_file_bytes = 4096;

/// Reads the token of `config_dir`: the first line of its token file, trimmed.
/// Never blocks, whatever the path names: it is stat()ed before it is opened,
/// opened non-blocking, and checked again through the open descriptor.
/// Fails, naming the path:
///  - with unauthenticated if the file is missing, unreadable, empty, or its
///    first line does not end within max_token_file_bytes;
///  - with permission_denied if the path is not a regular file (a directory,
///    a FIFO, a socket, a device: the message says which), or if the file's
///    mode grants any permission to group or others (mode & 077; the message
///    says `chmod 600 FILE`). permission_denied, not unauthenticated: the
///    token may be right, but cq refuses to use a secret that others can read
///    or replace until its owner fixes the file (exit code 4 either way).
/// A symbolic link is followed; what it points to must pass the same checks.
bus::result<std::string> read_token(const std::string& config_dir);

/// The first line of the file at `path` with surrounding blanks removed, or
/// nullopt if the file cannot be opened.
std::optional<std::string> read_first_line(const std::string& path);

/// Home directory: $HOME, else the passwd entry; "" if neither exists.
std::string home_dir();

} // namespace cq::cli
