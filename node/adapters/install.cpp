// cq-node install / uninstall (install.hpp).
#include "install.hpp"

#include "cq/node/files.hpp"
#include "cq/run_command.hpp"
#include "node/adapters/files.hpp"

#include <fmt/format.h>

#include <thread>

namespace cq::node {

namespace fs = std::filesystem;

namespace {

#ifdef __APPLE__
constexpr const char* plist_name = "org.cq.node";
const fs::path plist_source = "/usr/local/share/cq/launchd/org.cq.node.plist";
const fs::path plist_target = "/Library/LaunchDaemons/org.cq.node.plist";
#endif

/// The daemon's last answer from the coordinator (<state>/status), or "".
std::string read_status(const fs::path& file) {
  auto text = read_file_bounded(file, 4096).value_or("");
  return std::string(trim(std::string_view(text).substr(0, text.find('\n'))));
}

/// Starts the service; "" or why not.
std::string start_service(const fs::path& state_dir) {
  if (fs::absolute(state_dir).lexically_normal() != service_state_dir())
    return fmt::format("the service runs with --state {}; install without --state, or give "
                       "--no-start and run cq-node --state {} yourself",
                       service_state_dir().string(), state_dir.string());
#ifdef __APPLE__
  std::error_code ec;
  fs::copy_file(plist_source, plist_target, fs::copy_options::overwrite_existing, ec);
  if (ec)
    return fmt::format("cannot copy {} to {}: {}", plist_source.string(), plist_target.string(),
                       ec.message());
  fs::create_directories("/usr/local/var/log", ec);
  cq::run_command("cq-node",
                  {"launchctl", "bootout", fmt::format("system/{}", plist_name)}); // a previous one
  if (cq::run_command("cq-node", {"launchctl", "bootstrap", "system", plist_target.string()}) != 0)
    return "launchctl bootstrap failed (see above)";
  return {};
#else
  if (!cq::systemd_runs())
    return "this machine's init is not systemd: start `cq-node --state " + state_dir.string() +
           "` from its init system (docs/install.md), or give --no-start";
  if (cq::run_command("cq-node", {"systemctl", "enable", "--now", "cq-node.service"}) != 0)
    return "systemctl could not start cq-node.service (see above; journalctl -u cq-node)";
  return {};
#endif
}

} // namespace

fs::path service_state_dir() {
#ifdef __APPLE__
  return "/usr/local/var/cq-node";
#else
  return "/var/lib/cq-node";
#endif
}

int install_node(const install_options& o, const std::function<int()>& join) {
  auto config = o.state_dir / "node.toml";
  std::error_code ec;
  if (fs::exists(config, ec)) {
    fmt::print(stderr,
               "cq-node: {} exists: this machine has joined already; starting it as it is "
               "(cq-node uninstall first to join again)\n",
               config.string());
  } else if (int rc = join(); rc != 0) {
    return rc;
  }
  if (!o.start) {
    fmt::print("Joined as '{}'. Start the daemon with: cq-node --state {}\n", o.name,
               o.state_dir.string());
    return 0;
  }
  auto status_file = o.state_dir / "status";
  fs::remove(status_file, ec); // what an earlier daemon said is not an answer
  if (auto why = start_service(o.state_dir); !why.empty()) {
    fmt::print(stderr, "cq-node: install: {}\n", why);
    return 1;
  }
  auto deadline = std::chrono::steady_clock::now() + o.wait;
  fmt::print(stderr, "cq-node: waiting up to {} s for the coordinator to answer the daemon\n",
             o.wait.count());
  for (;;) {
    auto s = read_status(status_file);
    if (s == "approved") {
      fmt::print("Node '{}' is online and takes work.\n", o.name);
      return 0;
    }
    if (s == "pending approval") {
      fmt::print("Node '{}' is connected and waits for approval. On the coordinator, an "
                 "operator runs:\n  cq node approve {}\n",
                 o.name, o.name);
      return 0;
    }
    if (s.rfind("refused", 0) == 0) {
      fmt::print(stderr, "cq-node: install: the coordinator {}\n", s);
      return 1;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      fmt::print(stderr,
                 "cq-node: install: the daemon runs but has no answer from the coordinator "
                 "after {} s: check the address and the firewall (journalctl -u cq-node)\n",
                 o.wait.count());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

int uninstall_node(const install_options& o) {
  int rc = 0;
#ifdef __APPLE__
  cq::run_command("cq-node", {"launchctl", "bootout", fmt::format("system/{}", plist_name)});
  std::error_code rm;
  fs::remove(plist_target, rm);
#else
  if (cq::systemd_runs())
    rc = cq::run_command("cq-node", {"systemctl", "disable", "--now", "cq-node.service"});
#endif
  std::error_code ec;
  bool had = fs::remove(o.state_dir / "node.toml", ec);
  fs::remove(o.state_dir / "status", ec);
  fmt::print("{}The service is stopped and disabled; jobs still running here finish on their "
             "own. Logs stay in {}. On the coordinator, cq node disable NAME keeps work off "
             "it.\n",
             had ? "This machine's identity (node.toml) is removed. " : "", o.state_dir.string());
  return rc == 0 ? 0 : 1;
}

} // namespace cq::node
