// cq-node's daemon with the production adapters (daemon.hpp: run_node_daemon):
// the seams, the state dir, a small CAF actor system, and the wait for the
// stop signal.
#include "cq/node/daemon.hpp"
#include "node/actors/node_actors.hpp"
#include "node/adapters/adapters.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <poll.h>

#include <cerrno>

namespace cq::node {

int run_node_daemon(daemon_config cfg, int stop_fd) {
  auto probes = make_host_probes();
  auto& disk = machine_disk_instance();
  auto setup = open_node(cfg, *probes, disk);
  if (!setup) {
    spdlog::critical("{}", setup.error().message);
    return setup.error().code == errc::already_exists ? 5 : 1;
  }
  auto processes = make_process_host();
  std::optional<bus::client_curve> curve;
  if (!cfg.identity.server_key.empty()) {
    // The node's keypair is its identity on the wire: the coordinator ties
    // its name to the public key it joined with.
    auto k = bus::load_or_create_keypair((cfg.state_dir / "curve.key").string());
    if (!k) {
      spdlog::critical("{}", k.error().message);
      return 2;
    }
    curve = bus::client_curve{cfg.identity.server_key, *k};
  }
  auto link = make_link(cfg.identity.endpoint, curve);
  int rc = 0;
  {
    caf::actor_system_config sys_cfg;
    // Two workers: a slow step (the GPU lock's wait, an fsync) in one actor
    // does not hold up the others' timers; the idle RSS target stays.
    sys_cfg.set("scheduler.max-threads", 2);
    // Work sharing: idle workers block on a condition variable and wake at
    // once for a message from an adapter thread (work stealing polls, and
    // sleeps 10 ms at a time once relaxed: +10 ms on every order).
    sys_cfg.set("scheduler.policy", caf::atom("sharing"));
    sys_cfg.set("logger.verbosity", caf::atom("quiet"));
    caf::actor_system sys{sys_cfg};
    node_seams seams{processes.get(), probes.get(), link.get(), &disk, wall_clock_ms()};
    auto daemon = spawn_daemon(sys, std::move(*setup), seams);
    auto started = link->start({
        [daemon](std::string bytes) {
          caf::anon_send(daemon, frame_atom::value, std::move(bytes));
        },
        [daemon](std::uint64_t tag) { caf::anon_send(daemon, unsent_atom::value, tag); },
    });
    if (!started) {
      spdlog::critical("{}", started.error().message);
      rc = 1;
    } else {
      pollfd p{stop_fd, POLLIN, 0};
      while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
      }
      spdlog::info("stop requested; exiting (running workloads keep running)");
    }
    link->stop();
    processes->close();
    caf::anon_send_exit(daemon, caf::exit_reason::user_shutdown);
  }
  return rc;
}

} // namespace cq::node
