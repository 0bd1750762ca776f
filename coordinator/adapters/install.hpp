#pragma once
// `cq-coordinator install`: the coordinator host as a service in one command
// (docs/install.md). main.cpp creates the Owner in the service's state dir;
// this part writes /etc/default/cq-coordinator, hands the state dir to the
// service's user and starts the unit.

#include <filesystem>
#include <string>

namespace cq::coord {

struct service_install {
  std::filesystem::path state_dir; ///< the unit's --state
  std::string opts;                ///< CQ_COORDINATOR_OPTS: --bind, --advertise
  bool start = true;               ///< write the defaults file, enable and start the unit (systemd)
};

/// The state directory cq-coordinator.service runs with.
std::filesystem::path service_state_dir();

/// Writes the defaults file, gives the state dir to the user `cq` (when it
/// exists: the package makes it) and enables and starts the unit. "" or why not.
std::string install_service(const service_install& s);

} // namespace cq::coord
