// cq-coordinator: holds the queue, places jobs, serves the API over ZeroMQ.
//
// Shutdown is crash-only (docs/adr/0003): every acknowledged change is already
// committed, so SIGTERM simply stops the gateway and exits, exactly like the
// recovery path after kill -9 expects.
#include "auth/auth.hpp"
#include "coordinator.hpp"
#include "store/store.hpp"

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

std::string default_state_dir() {
  const char* home = std::getenv("HOME");
  return fmt::format("{}/.local/share/cq/coordinator", home ? home : ".");
}

bool is_loopback(const std::string& ep) {
  return ep.rfind("tcp://127.", 0) == 0 || ep.rfind("tcp://localhost:", 0) == 0 ||
         ep.rfind("tcp://[::1]:", 0) == 0 || ep.rfind("ipc://", 0) == 0 ||
         ep.rfind("inproc://", 0) == 0;
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"cq-coordinator: the cq job queue's coordinator"};
  std::string state = default_state_dir();
  std::string bind = "tcp://127.0.0.1:7800";
  std::string init_owner;
  std::string log_level = "info";
  std::int64_t start_timeout_ms = 30000;
  std::int64_t heartbeat_fresh_ms = 5000;
  app.add_option("--state", state, "state directory (SQLite database)");
  app.add_option("--bind", bind, "ZeroMQ endpoint to serve on (loopback only for now)");
  app.add_option("--init-owner", init_owner,
                 "create the Owner identity, print its token once, exit");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  app.add_option("--start-timeout-ms", start_timeout_ms,
                 "how long a node may take to confirm a start")
      ->check(CLI::Range(100, 3600000));
  app.add_option("--heartbeat-fresh-ms", heartbeat_fresh_ms,
                 "a node is live if it beat within this")
      ->check(CLI::Range(100, 3600000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("cq-coordinator"));
  spdlog::set_level(spdlog::level::from_str(log_level));

  std::error_code ec;
  fs::create_directories(state, ec);
  if (ec) {
    fmt::print(stderr, "cq-coordinator: error: cannot create state directory {}: {}\n", state,
               ec.message());
    return 1;
  }
  fs::permissions(state, fs::perms::owner_all, fs::perm_options::replace, ec);
  auto lock_path = fs::path(state) / "coordinator.lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    fmt::print(stderr, "cq-coordinator: error: another coordinator uses {} (lock {})\n", state,
               lock_path.string());
    return 5;
  }
  std::shared_ptr<cq::coord::store> db;
  try {
    db = std::make_shared<cq::coord::store>((fs::path(state) / "cq.db").string());
  } catch (const std::exception& e) {
    fmt::print(stderr, "cq-coordinator: error: {}\n", e.what());
    return 1;
  }

  if (!init_owner.empty()) {
    try {
      auto token = cq::coord::init_owner(*db, init_owner, cq::coord::new_token(), wall_ms());
      fmt::print(stderr, "Owner '{}' created. Its token is shown once, below:\n", init_owner);
      fmt::print("{}\n", token);
      return 0;
    } catch (const std::exception& e) {
      fmt::print(stderr, "cq-coordinator: error: {}\n", e.what());
      return 5;
    }
  }
  if (!is_loopback(bind)) {
    fmt::print(stderr,
               "cq-coordinator: error: --bind {}: only loopback endpoints are allowed until CURVE "
               "encryption is configured\n",
               bind);
    return 2;
  }

  // Block the stop signals before any thread starts, then wait for them here.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 2);
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  auto wiring = cq::coord::make_zmq_wiring(sys);
  std::unique_ptr<cq::bus::gateway> gw;
  try {
    gw = std::make_unique<cq::bus::gateway>(bind, cq::coord::gateway_handlers(wiring));
  } catch (const std::exception& e) {
    fmt::print(stderr, "cq-coordinator: error: {}\n", e.what());
    std::_Exit(1);
  }
  cq::actors::context ctx;
  ctx.cfg.start_timeout = std::chrono::milliseconds(start_timeout_ms);
  ctx.cfg.heartbeat_fresh_ms = heartbeat_fresh_ms;
  ctx.epoch_ms = wall_ms();
  ctx.steady = sys.clock().now();
  ctx.new_id = cq::coord::new_uuid;
  ctx.new_token = cq::coord::new_token;
  ctx.new_invite_code = cq::coord::new_invite_code;
  ctx.make_link = cq::coord::zmq_link_factory(wiring);
  auto live = cq::coord::spawn_coordinator(sys, db, ctx);
  cq::coord::connect_gateway(wiring, *gw, live->api);
  gw->start();
  spdlog::info("serving on {} with state in {}", gw->endpoint(), state);

  int sig = 0;
  sigwait(&sigs, &sig);
  spdlog::info("signal {}: stopping", sig);
  gw.reset();
  std::_Exit(0);
}
