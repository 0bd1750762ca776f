// cq-node: the node daemon.
//
//   cq-node --join [ENDPOINT] CODE NAME [--state DIR] trade an invite code for a
//       token, write <state>/node.toml (0600), then run
//   cq-node [--state DIR]                             run with <state>/node.toml
//   cq-node install [ENDPOINT] CODE NAME | uninstall  as a service (adapters/install.hpp)
//   cq-node doctor [--json] [--no-self-tests]         check this machine (adapters/doctor.hpp)
//
// node.toml may carry [capacity] and [policy] tables (see cq/node/config.hpp).
// --mem-total, --mem-available and --cpus override [capacity] (the command line
// wins): a way to run several fake nodes with chosen capacities on one machine
// for tests.
//
// Exit codes follow the CLI's (SPEC section 7): 0 clean stop, 1 internal error
// or coordinator unreachable, 2 invalid input or configuration, 3-5 from the
// coordinator's error code when joining.

#include "cq/bus/client.hpp"
#include "cq/bus/wakeup.hpp"
#include "cq/node/config.hpp"
#include "cq/node/daemon.hpp"
#include "cq/version.hpp"
#include "node/adapters/adapters.hpp"
#include "node/adapters/doctor.hpp"
#include "node/adapters/install.hpp"

#include "cq/help_format.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>

namespace {

namespace fs = std::filesystem;

/// Notified by the signal handler; polled by the daemon loop.
const cq::bus::wakeup* stop_wakeup = nullptr;

extern "C" void on_stop_signal(int) {
  if (stop_wakeup)
    stop_wakeup->notify();
}

bool install_signal_handlers() {
  static const cq::bus::wakeup stop;
  if (!stop.valid())
    return false;
  stop_wakeup = &stop;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  // Children are reaped through pidfds or waitid: SIGCHLD must not be ignored
  // (an inherited SIG_IGN would make the kernel reap them before we read
  // their status). The posix platform installs its own handler.
  ::signal(SIGCHLD, SIG_DFL);
  return ::sigaction(SIGTERM, &sa, nullptr) == 0 && ::sigaction(SIGINT, &sa, nullptr) == 0;
}

fs::path default_state_dir() {
  const char* home = std::getenv("HOME");
  if (!home || !*home)
    return {};
  return fs::path(home) / ".local" / "share" / "cq" / "node";
}

int join(const std::vector<std::string>& args, const fs::path& config_file) {
  // CODE NAME (the code carries the endpoint and the server key), or
  // ENDPOINT CODE NAME.
  auto invite = cq::bus::parse_invite(args.size() == 2 ? args[0] : args[1]);
  if (!invite) {
    fmt::print(stderr, "cq-node: --join: {}\n", invite.error().message);
    return 2;
  }
  std::string endpoint = args.size() == 3 ? args[0] : invite->endpoint;
  const auto& name = args.back();
  if (endpoint.empty()) {
    fmt::print(stderr, "cq-node: --join: this code carries no endpoint: give it first "
                       "(--join ENDPOINT CODE NAME)\n");
    return 2;
  }
  if (endpoint.find("://") == std::string::npos)
    endpoint = "tcp://" + endpoint;
  std::optional<cq::bus::client_curve> curve;
  if (!invite->server_key.empty()) {
    auto k = cq::bus::load_or_create_keypair((config_file.parent_path() / "curve.key").string());
    if (!k) {
      fmt::print(stderr, "cq-node: --join: {}\n", k.error().message);
      return 1;
    }
    curve = cq::bus::client_curve{invite->server_key, *k};
  }
  spdlog::info("joining the coordinator at {} as '{}'{}", endpoint, name,
               curve ? " (CurveZMQ)" : "");
  cq::bus::client client(endpoint, "", std::chrono::seconds(5), curve);
  auto rep = client.call<cq::bus::node_join_rep>(cq::bus::node_join_req{name, invite->secret});
  if (!rep) {
    auto& e = rep.error();
    fmt::print(stderr, "cq-node: join failed: {}: {}\n", cq::to_string(e.code), e.message);
    return cq::exit_code(e.code);
  }
  if (rep->token.empty()) {
    fmt::print(stderr, "cq-node: join failed: the coordinator returned an empty token\n");
    return 1;
  }
  cq::node::node_config cfg;
  cfg.endpoint = endpoint;
  cfg.name = name;
  cfg.token = rep->token;
  cfg.server_key = invite->server_key;
  if (auto st = cq::node::save_node_config(config_file, cfg); !st) {
    fmt::print(stderr, "cq-node: joined, but {}\n", st.error().message);
    return 1;
  }
  spdlog::info("joined as '{}'; identity written to {}", name, config_file.string());
  return 0;
}

/// Accepts a decimal integer >= `min` (and nothing else: no sign, no fraction).
CLI::Validator whole_number(std::uint64_t min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        std::uint64_t n = 0;
        auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (v.empty() || ec != std::errc{} || p != v.data() + v.size() || n < min)
          return fmt::format("'{}' is not a whole number >= {}", v, min);
        return {};
      },
      "");
}

} // namespace

int main(int argc, char** argv) {
  // Descriptors 0, 1 and 2 are never left free: a file the daemon opens
  // later would take one, and a job's log or stdin handed on as 0, 1 or 2
  // can be lost in the child's dup2s (docs/adr/0050).
  for (int fd = 0; fd < 3; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF && ::open("/dev/null", O_RDWR) != fd)
      break;
  CLI::App app{"cq-node: the cq node daemon (runs jobs placed on this machine)"};
  cq::use_help_format(app);
  app.set_version_flag("--version",
                       fmt::format("cq-node {} (commit {})", cq::version(), cq::commit()));
  std::vector<std::string> join_args;
  std::string state;
  std::int64_t heartbeat_ms = 1000;
  std::string log_level = "info";
  std::optional<std::uint64_t> mem_total, mem_available, cpus;
  app.add_option("--join", join_args,
                 "Join a coordinator with an invite code (cq node invite NAME), then run")
      ->expected(2, 3)
      ->type_name("[ENDPOINT] CODE NAME");
  app.add_option("--state", state, "State directory (default $HOME/.local/share/cq/node)")
      ->type_name("DIR");
  app.add_option("--heartbeat-ms", heartbeat_ms, "Heartbeat interval in milliseconds")
      ->check(CLI::Range(std::int64_t{50}, std::int64_t{600'000}));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--mem-total", mem_total,
                 "Report this MemTotal instead of the machine's (testing; see [capacity])")
      ->type_name("BYTES")
      ->check(whole_number(1));
  app.add_option("--mem-available", mem_available,
                 "Report this constant MemAvailable instead of the machine's (testing)")
      ->type_name("BYTES")
      ->check(whole_number(0));
  app.add_option("--cpus", cpus, "Report this CPU count instead of the machine's (testing)")
      ->type_name("N")
      ->check(whole_number(1));
  // The platform layer: linux (cgroups, pidfds, /proc) or posix (what a Mac
  // runs: SIGCHLD, a memory watchdog, no cgroups). CQ_NODE_PLATFORM is the
  // default, so that `cq up` and the tests can choose it for every node.
  std::string platform;
  if (const char* env = std::getenv("CQ_NODE_PLATFORM"); env && *env)
    platform = env;
  app.add_option("--platform", platform,
                 fmt::format("Platform layer: linux or posix (default {}; env CQ_NODE_PLATFORM)",
                             to_string(cq::node::default_platform())))
      ->type_name("NAME");
  // cq-node install [ENDPOINT] CODE NAME / uninstall: the machine as a service.
  std::vector<std::string> install_args;
  bool no_start = false;
  std::int64_t wait_s = 60;
  auto* install =
      app.add_subcommand("install", "Join a coordinator and run cq-node as a service (systemd "
                                    "on Linux, launchd on macOS); waits until it is online");
  install->add_option("args", install_args, "[ENDPOINT] CODE NAME (cq node invite NAME)")
      ->expected(2, 3)
      ->required();
  install->add_flag("--no-start", no_start, "Join only: do not start the service");
  bool doctor_json = false, no_self_tests = false, force = false;
  install->add_flag("--force", force, "Install even where cq-node doctor finds a problem");
  install->add_option("--wait", wait_s, "Seconds to wait for the coordinator's answer")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{3600}));
  install->fallthrough();
  auto* uninstall = app.add_subcommand(
      "uninstall", "Stop and disable the service and forget this machine's identity");
  uninstall->fallthrough();
  auto* doctor = app.add_subcommand(
      "doctor", "Check this machine before it takes work: cgroups and memory caps, delegation, "
                "GPUs, kernel log, GPU locks, run-as; then two 5-second self-tests");
  doctor->add_flag("--json", doctor_json, "Print JSON");
  doctor->add_flag("--no-self-tests", no_self_tests, "Skip the self-test jobs");
  doctor->fallthrough();
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto platform_kind =
      platform.empty() ? cq::node::default_platform() : cq::node::parse_platform(platform);
  if (!platform_kind) {
    fmt::print(stderr, "cq-node: --platform {}: not a platform of this build (use {})\n", platform,
#if defined(__linux__)
               "linux or posix"
#else
               "posix"
#endif
    );
    return 2;
  }
  if (*platform_kind == cq::node::platform_kind::posix)
    cq::node::block_child_signal(); // before any thread (adapters.hpp)
  bool service_command = install->parsed() || uninstall->parsed() || doctor->parsed();
  if (service_command && state.empty())
    state = cq::node::service_state_dir().string();

  auto logger = spdlog::stderr_color_mt("cq-node");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(log_level));

  fs::path state_dir = state.empty() ? default_state_dir() : fs::path(state);
  if (state_dir.empty()) {
    fmt::print(stderr, "cq-node: HOME is not set; give the state directory with --state DIR\n");
    return 2;
  }
  std::error_code ec;
  state_dir = fs::absolute(state_dir, ec).lexically_normal();
  if (ec) {
    fmt::print(stderr, "cq-node: bad state directory {}: {}\n", state, ec.message());
    return 2;
  }
  auto config_file = state_dir / "node.toml";

  if (service_command) {
    cq::node::install_options io;
    io.state_dir = state_dir;
    io.name = install_args.empty() ? "" : install_args.back();
    io.start = !no_start;
    io.wait = std::chrono::seconds(wait_s);
    if (uninstall->parsed())
      return cq::node::uninstall_node(io);
    if (doctor->parsed())
      return cq::node::run_doctor({state_dir, doctor_json, !no_self_tests, *platform_kind});
    if (cq::node::run_doctor({state_dir, false, true, *platform_kind}) != 0 && !force) {
      fmt::print(stderr, "cq-node install: cq-node doctor found a problem (above): fix it, or "
                         "give --force to install anyway\n");
      return 1;
    }
    return cq::node::install_node(io, [&] {
      if (fs::create_directories(state_dir, ec))
        ::chmod(state_dir.c_str(), 0700);
      if (ec) {
        fmt::print(stderr, "cq-node: cannot create {}: {}\n", state_dir.string(), ec.message());
        return 1;
      }
      return join(install_args, config_file);
    });
  }

  if (!join_args.empty()) {
    // A state dir we create is private (it holds the token); an existing one
    // keeps the permissions its owner chose.
    if (fs::create_directories(state_dir, ec))
      ::chmod(state_dir.c_str(), 0700);
    if (ec) {
      fmt::print(stderr, "cq-node: cannot create {}: {}\n", state_dir.string(), ec.message());
      return 1;
    }
    if (int rc = join(join_args, config_file); rc != 0)
      return rc;
  }

  auto cfg = cq::node::load_node_config(config_file);
  if (!cfg) {
    fmt::print(stderr, "cq-node: {}\n", cfg.error().message);
    return 2;
  }
  auto& cap = cfg->capacity;
  if (mem_total)
    cap.mem_total_bytes = mem_total;
  if (mem_available)
    cap.mem_available_bytes = mem_available;
  if (cpus)
    cap.cpus = cpus;
  if (auto st = cq::node::validate_capacity(cap); !st) {
    fmt::print(stderr, "cq-node: {} (from {} and the command line)\n", st.error().message,
               config_file.string());
    return 2;
  }
  if (!install_signal_handlers()) {
    fmt::print(stderr, "cq-node: cannot install signal handlers\n");
    return 1;
  }
  cq::node::daemon_config dc;
  dc.state_dir = state_dir;
  dc.identity = std::move(*cfg);
  dc.heartbeat_ms = heartbeat_ms;
  dc.platform = platform;
  return cq::node::run_node_daemon(std::move(dc), stop_wakeup->fd());
}
