#pragma once
// `cq-node install` and `cq-node uninstall`: a machine joins the queue as a
// service in one command (docs/install.md). The join itself is cq-node's
// (main.cpp); this part writes nothing but through it, starts the service
// (systemd on Linux, launchd on macOS) and waits until the coordinator
// answers the daemon.

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

namespace cq::node {

struct install_options {
  std::filesystem::path state_dir; ///< where node.toml goes
  std::string name;                ///< the node's name (for the messages)
  bool start = true;               ///< enable and start the service, then wait
  std::chrono::seconds wait{60};   ///< how long to wait for the coordinator's answer
};

/// The state directory the service runs with (the unit's or the plist's --state).
std::filesystem::path service_state_dir();

/// Joins with `join` (0 or an exit code) unless node.toml already exists,
/// starts the service and waits until <state>/status says approved (0),
/// pending approval (0, with how to approve), refused (1) or nothing (1).
int install_node(const install_options& o, const std::function<int()>& join);

/// Stops and disables the service and removes node.toml (the identity); the
/// state directory's jobs' logs stay.
int uninstall_node(const install_options& o);

} // namespace cq::node
