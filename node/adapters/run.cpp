// cq-node's daemon with the production adapters (daemon.hpp: run_node_daemon):
// the seams, the state dir, a small CAF actor system, and the wait for the
// stop signal.
#include "cq/node/daemon.hpp"
#include "node/actors/node_actors.hpp"
#include "node/adapters/adapters.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace cq::node {

namespace {

/// The [run_as] users of the node's config, from the passwd and group
/// databases. A mapping needs a root daemon (unless every user is the
/// daemon's own); a user that does not exist stops the daemon at start.
std::optional<std::string> resolve_run_as(daemon_config& cfg) {
  for (auto& [id, user] : cfg.identity.run_as) {
    std::vector<char> buf(16384);
    struct passwd pw {};
    struct passwd* found = nullptr;
    if (getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found)
      return fmt::format("run_as.{}: no local user '{}'", id, user);
    credential c{user, pw.pw_uid, pw.pw_gid, {}};
    int n = 64;
    std::vector<gid_t> groups(static_cast<std::size_t>(n));
    if (getgrouplist(user.c_str(), pw.pw_gid, groups.data(), &n) < 0) {
      groups.resize(static_cast<std::size_t>(n));
      getgrouplist(user.c_str(), pw.pw_gid, groups.data(), &n);
    }
    groups.resize(static_cast<std::size_t>(std::max(n, 0)));
    c.groups = std::move(groups);
    if (::geteuid() != 0 && c.uid != ::geteuid())
      return fmt::format("run_as.{}: running jobs as user '{}' needs a root cq-node (this one "
                         "runs as uid {})",
                         id, user, ::geteuid());
    spdlog::info("run-as: jobs of identity {} run as {} (uid {}, gid {}, {} groups)", id, user,
                 c.uid, c.gid, c.groups.size());
    cfg.run_as[id] = std::move(c);
  }
  // The mapped users reach their jobs' state dirs through the node's state
  // dir: traversable, never listable (its files stay 0600).
  if (!cfg.run_as.empty()) {
    struct stat st {};
    if (::stat(cfg.state_dir.c_str(), &st) == 0 && (st.st_mode & 0777) == 0700)
      ::chmod(cfg.state_dir.c_str(), 0711);
  }
  return std::nullopt;
}

} // namespace

int run_node_daemon(daemon_config cfg, int stop_fd) {
  if (auto err = resolve_run_as(cfg)) {
    spdlog::critical("{}", *err);
    return 2;
  }
  auto platform = cfg.platform.empty() ? default_platform() : parse_platform(cfg.platform);
  if (!platform) {
    spdlog::critical("--platform {}: this build has no such platform", cfg.platform);
    return 2;
  }
  spdlog::info("platform {}", to_string(*platform));
  auto probes = make_host_probes(*platform);
  auto& disk = machine_disk_instance();
  auto setup = open_node(cfg, *probes, disk);
  if (!setup) {
    spdlog::critical("{}", setup.error().message);
    return setup.error().code == errc::already_exists ? 5 : 1;
  }
  auto processes = make_process_host(*platform);
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
        [daemon](std::vector<std::string> frames) {
          caf::anon_send(daemon, frame_atom::value, std::move(frames));
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
