#pragma once
// Where `cq` finds its coordinator and its identity (SPEC section 7).
//
//  - config dir: $CQ_CONFIG_DIR if set and non-empty, else $HOME/.config/cq.
//  - endpoint:   $CQ_URL, else the first line of <config dir>/url, else
//                tcp://127.0.0.1:7800.
//  - token:      the first line of <config dir>/token, trimmed. There is no
//                fallback: a separate identity (CQ_CONFIG_DIR) whose token is
//                missing fails instead of silently using another one.
//  - timeout:    per call, 10 s, or $CQ_TIMEOUT_MS.

#include "cq/bus/protocol.hpp"

#include <chrono>
#include <string>

namespace cq::cli {

inline constexpr std::string_view default_endpoint = "tcp://127.0.0.1:7800";
inline constexpr std::chrono::milliseconds default_call_timeout{10000};

struct cli_config {
  std::string config_dir; ///< absolute or as given in CQ_CONFIG_DIR
  std::string endpoint;   ///< ZeroMQ endpoint of the coordinator
  std::chrono::milliseconds timeout{default_call_timeout}; ///< per call
};

/// Reads the environment and <config dir>/url. Fails with invalid_argument if
/// CQ_TIMEOUT_MS is not a positive integer, or internal if no config dir can be
/// derived (neither CQ_CONFIG_DIR nor HOME nor a passwd entry).
bus::result<cli_config> load_config();

/// The config dir alone (same rules as load_config()).
bus::result<std::string> config_dir();

/// Path of the token file in `config_dir`.
std::string token_path(const std::string& config_dir);

/// Reads the token of `config_dir`. Fails with unauthenticated, naming the
/// path, if the file is missing, unreadable or empty.
bus::result<std::string> read_token(const std::string& config_dir);

/// The first line of the file at `path` with surrounding blanks removed, or
/// nullopt if the file cannot be opened.
std::optional<std::string> read_first_line(const std::string& path);

/// Home directory: $HOME, else the passwd entry; "" if neither exists.
std::string home_dir();

} // namespace cq::cli
