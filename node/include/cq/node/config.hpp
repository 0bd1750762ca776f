#pragma once
// The node's identity file, `<state>/node.toml`: where the coordinator is, the
// node's name and its secret token (hence mode 0600). Written once by
// `cq-node --join`, read at every start.

#include "cq/bus/protocol.hpp"
#include "cq/node/files.hpp"

#include <filesystem>
#include <string>

namespace cq::node {

struct node_config {
  std::string endpoint; ///< coordinator endpoint, e.g. "tcp://127.0.0.1:7800"
  std::string name;     ///< this node's name, as invited
  std::string token;    ///< the node token returned by node_join
};

/// Reads and validates `file`. On failure the message names the file and the
/// problem (missing, unreadable, not TOML, a key missing or empty); a missing
/// file is errc::not_found, everything else errc::invalid_argument.
bus::result<node_config> load_node_config(const std::filesystem::path& file);

/// Writes `cfg` to `file` atomically with mode 0600 (see write_file_atomic).
status save_node_config(const std::filesystem::path& file, const node_config& cfg);

} // namespace cq::node
