// cq-coordinator: holds the queue, places jobs, serves the API over ZeroMQ.
//
// Shutdown is crash-only (docs/adr/0003): every acknowledged change is already
// committed, so SIGTERM simply stops the gateway and exits, exactly like the
// recovery path after kill -9 expects.
#include "adapters/install.hpp"
#include "adapters/memory.hpp"
#include "adapters/web.hpp"
#include "auth/auth.hpp"
#include "config/config.hpp"
#include "coordinator.hpp"
#include "cq/bus/curve.hpp"
#include "cq/bus/gateway.hpp"
#include "cq/metrics.hpp"
#include "cq/units.hpp"
#include "cq/version.hpp"
#include "observe.hpp"
#include "store/job_record.hpp"
#include "store/store.hpp"

#include "cq/help_format.hpp"

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <fcntl.h>
#ifdef CQ_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif
#include <sys/file.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

std::string default_state_dir() {
  const char* home = std::getenv("HOME");
  return fmt::format("{}/.local/share/cq/coordinator", home ? home : ".");
}

/// The endpoint for --bind: `tcp://HOST:PORT`, `ipc://PATH`, or the
/// compute-queue seed's `HOST:PORT` (taken as tcp).
std::string endpoint_of(const std::string& bind) {
  if (bind.find("://") != std::string::npos)
    return bind;
  return "tcp://" + bind;
}

bool is_loopback(const std::string& ep) {
  return ep.rfind("tcp://127.", 0) == 0 || ep.rfind("tcp://localhost:", 0) == 0 ||
         ep.rfind("tcp://[::1]:", 0) == 0 || ep.rfind("ipc://", 0) == 0 ||
         ep.rfind("inproc://", 0) == 0;
}

/// SPEC section 10 (damage is loud): the state dir's identity file ties the
/// dir to its database. A dir that held state never starts silently empty,
/// and a database from elsewhere is refused. Returns an error message, or ""
/// when the database may be opened (after which adopt_state() runs).
std::string check_state_dir(const fs::path& dir) {
  auto db = dir / "cq.db";
  auto id_file = dir / "state.id";
  std::error_code ec;
  bool has_db = fs::exists(db, ec);
  if (has_db)
    return {};
  for (auto& evidence : {id_file, fs::path(db.string() + "-wal")})
    if (fs::exists(evidence, ec))
      return fmt::format("{} is missing, but {} shows this directory held a coordinator's "
                         "state: restore cq.db from a backup, or start with another --state "
                         "directory (refusing to start with an empty queue)",
                         db.string(), evidence.string());
  return {};
}

/// Writes or checks state.id against the database's own id (set on first use).
std::string adopt_state(const fs::path& dir, cq::coord::store& db) {
  auto id_file = dir / "state.id";
  auto id = db.state_id();
  std::string on_disk;
  if (std::ifstream in(id_file); in)
    std::getline(in, on_disk);
  if (!id) {
    id = on_disk.empty() ? cq::coord::new_uuid() : on_disk;
    db.set_state_id(*id);
  }
  if (!on_disk.empty() && on_disk != *id)
    return fmt::format("{} belongs to another state directory (its id is {}, this directory's "
                       "state.id says {}); refusing to start on it",
                       (dir / "cq.db").string(), *id, on_disk);
  if (on_disk.empty()) {
    std::ofstream out(id_file, std::ios::trunc);
    out << *id << "\n";
    out.flush();
    if (!out)
      return fmt::format("cannot write {}", id_file.string());
  }
  return {};
}

/// Tells systemd (Type=notify) how the service stands; nothing without
/// $NOTIFY_SOCKET, or where libsystemd is not built in (macOS).
void notify_service_manager(const std::string& state) {
#ifdef CQ_HAVE_SYSTEMD
  ::sd_notify(0, state.c_str());
#else
  (void)state;
#endif
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace

/// A job's fields for a notification, from its stored row (web.hpp).
cq::coord::notify_job read_notify_job(const std::string& record, const std::string& id,
                                      const std::string& state, std::int64_t finished_ms,
                                      const std::string& priority) {
  auto j = cq::coord::decode_job_record(record, id, state, finished_ms, priority);
  return {j.name,      j.owner, std::string(to_string(j.state)),
          j.priority,  j.node,  std::string(to_string(j.reason)),
          j.exit_code, j.notify};
}

int main(int argc, char** argv) {
  cq::coord::prefault_new_memory(); // docs/adr/0051
  CLI::App app{"cq-coordinator: the cq job queue's coordinator"};
  cq::use_help_format(app);
  app.set_version_flag("--version",
                       fmt::format("cq-coordinator {} (commit {})", cq::version(), cq::commit()));
  std::string state = default_state_dir();
  std::string bind = "tcp://127.0.0.1:7800";
  std::string init_owner;
  std::vector<std::string> add_token;
  bool curve_on_loopback = false, show_key = false;
  std::string advertise;
  std::string local_socket;
  std::string log_level = "info";
  std::int64_t start_timeout_ms = 30000;
  std::int64_t heartbeat_fresh_ms = 5000;
  app.add_option("--state", state, "state directory (SQLite database)");
  bool check = false;
  app.add_option(
      "--bind", bind,
      "endpoint to serve on: HOST:PORT or tcp://HOST:PORT (off loopback: always CurveZMQ)");
  app.add_option("--local-socket", local_socket,
                 "also serve this machine's clients on the Unix socket at PATH (cq up uses "
                 "STATE/cq.sock); cq prefers it to TCP (docs/adr/0032)")
      ->type_name("PATH");
  app.add_flag("--check", check,
               "check the state database: list damaged rows by table and id, exit 1 if any");
  app.add_flag("--curve", curve_on_loopback,
               "Encrypt with CurveZMQ on loopback too (always on off loopback)");
  app.add_flag("--show-key", show_key,
               "Print the coordinator's CURVE public key (made on first use) and exit");
  app.add_option("--advertise", advertise,
                 "HOST:PORT that invite codes tell nodes to join (default: the bound address)")
      ->type_name("HOST:PORT");
  app.add_option("--add-token", add_token,
                 "Add a token for identity NAME with ROLE (owner, operator, submitter), print "
                 "it once and exit; run with the coordinator stopped (or use cq token add)")
      ->expected(2)
      ->type_name("NAME ROLE");
  app.add_option("--init-owner", init_owner,
                 "create the Owner identity, print its token once, exit");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  app.add_option("--start-timeout-ms", start_timeout_ms,
                 "how long a node may take to confirm a start")
      ->check(CLI::Range(100, 3600000));
  app.add_option("--heartbeat-fresh-ms", heartbeat_fresh_ms,
                 "a node is live if it beat within this")
      ->check(CLI::Range(100, 3600000));
  std::string config_file, lease, yield_grace, node_timeout, lost_after, board;
  bool check_config = false;
  app.add_option("--config", config_file,
                 "TOML settings: [scheduler] lease, yield_grace; [nodes] timeout, lost_after; "
                 "[notify_blocked_after] yield, other; [retention] operations, history, "
                 "history_jobs; [http]; [[notify]] (docs/operations.md)");
  app.add_flag("--check-config", check_config, "validate --config FILE and exit (0 valid, 2 not)");
  app.add_option("--lease", lease, "default lease of a job (default 30m)");
  app.add_option("--yield-grace", yield_grace,
                 "a job asked to yield is stopped after this (default 5m)");
  app.add_option("--node-timeout", node_timeout,
                 "a node without a heartbeat for this long is down (default 30s)");
  app.add_option("--lost-after", lost_after,
                 "an allocation on a down node is lost after this, or never (default 5m)");
  app.add_option("--board", board,
                 "keep an atomically replaced JSON snapshot of nodes and the queue in FILE");
  std::string http;
  app.add_option("--http", http,
                 "serve the status page and /metrics on HOST:PORT, e.g. 127.0.0.1:7880 (off by "
                 "default; a bind off loopback asks for a token)");
  // cq-coordinator install --owner NAME: the coordinator host as a service.
  std::string install_owner;
  bool install_no_start = false;
  auto* install = app.add_subcommand(
      "install", "Set this machine up as the team's coordinator service (systemd): creates the "
                 "Owner, binds off loopback with CurveZMQ, starts the service");
  install
      ->add_option("--owner", install_owner,
                   "The Owner identity to create (its token is printed once)")
      ->required();
  install->add_flag("--no-start", install_no_start,
                    "Create the Owner only; print the options to start the service with");
  install->fallthrough();
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // sun_path holds 108 bytes with its terminating NUL.
  if (!local_socket.empty() && (local_socket.front() != '/' || local_socket.size() > 107)) {
    fmt::print(stderr,
               "cq-coordinator: error: --local-socket: give an absolute path of at most 107 "
               "bytes (a Unix socket's limit), not '{}'\n",
               local_socket);
    return 2;
  }
  std::string install_opts;
  if (install->parsed()) {
    if (app.count("--state") == 0)
      state = cq::coord::service_state_dir().string();
    if (app.count("--bind") == 0)
      bind = "tcp://0.0.0.0:7800";
    if (advertise.empty()) {
      // Nodes and people reach a wildcard bind by this machine's name.
      auto host_port = endpoint_of(bind).substr(endpoint_of(bind).find("://") + 3);
      auto host = host_port.substr(0, host_port.rfind(':'));
      if (host == "0.0.0.0" || host == "*" || host == "[::]") {
        char name[256] = {};
        ::gethostname(name, sizeof name - 1);
        host = name;
      }
      advertise = fmt::format("{}:{}", host, host_port.substr(host_port.rfind(':') + 1));
    }
    install_opts = fmt::format("--bind {} --advertise {}", bind, advertise);
    init_owner = install_owner;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("cq-coordinator"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  cq::coord::coordinator_settings settings;
  if (!config_file.empty()) {
    std::ifstream in(config_file);
    if (!in) {
      fmt::print(stderr, "cq-coordinator: error: --config {}: cannot read it\n", config_file);
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    if (auto e = cq::coord::parse_settings(text.str(), config_file, settings)) {
      fmt::print(stderr, "cq-coordinator: error: {}\n", *e);
      return 2;
    }
  } else if (check_config) {
    fmt::print(stderr, "cq-coordinator: error: --check-config needs --config FILE\n");
    return 2;
  }
  // Flags override the file.
  for (auto [flag, text, out, never_ok] :
       {std::tuple{"--lease", &lease, &settings.lease_ms, false},
        std::tuple{"--yield-grace", &yield_grace, &settings.yield_grace_ms, false},
        std::tuple{"--node-timeout", &node_timeout, &settings.node_timeout_ms, false},
        std::tuple{"--lost-after", &lost_after, &settings.lost_after_ms, true}}) {
    if (text->empty())
      continue;
    if (never_ok && *text == "never") {
      *out = 0;
      continue;
    }
    std::string why;
    auto ms = cq::parse_duration_ms(*text, why);
    if (!ms) {
      fmt::print(stderr, "cq-coordinator: error: {} {}: {}\n", flag, *text, why);
      return 2;
    }
    *out = static_cast<std::int64_t>(*ms);
  }
  if (http.empty())
    http = settings.http_listen;
  if (auto why = cq::coord::listen_problem(http); !http.empty() && !why.empty()) {
    fmt::print(stderr, "cq-coordinator: error: {}\n", why);
    return 2;
  }
  if (check_config) {
    fmt::print("{}: valid\n", config_file);
    return 0;
  }

  std::error_code ec;
  fs::create_directories(state, ec);
  if (ec) {
    fmt::print(stderr, "cq-coordinator: error: cannot create state directory {}: {}\n", state,
               ec.message());
    return 1;
  }
  fs::permissions(state, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (auto why = check_state_dir(state); !why.empty()) {
    fmt::print(stderr, "cq-coordinator: error: {}\n", why);
    return 1;
  }
  if (show_key) {
    // Reads (or makes) only the key file: it works beside a running coordinator.
    auto k = cq::bus::load_or_create_keypair((fs::path(state) / "curve.key").string());
    if (!k) {
      fmt::print(stderr, "cq-coordinator: error: {}\n", k.error().message);
      return 2;
    }
    fmt::print("{}\n", k->public_key);
    return 0;
  }
  if (check && !fs::exists(fs::path(state) / "cq.db")) {
    fmt::print(stderr, "cq-coordinator: error: no database at {}\n",
               (fs::path(state) / "cq.db").string());
    return 3;
  }
  auto lock_path = fs::path(state) / "coordinator.lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    fmt::print(stderr, "cq-coordinator: error: another coordinator uses {} (lock {}){}\n", state,
               lock_path.string(),
               add_token.empty() ? "" : "; stop it first, or use cq token add with an owner token");
    return 5;
  }
  std::shared_ptr<cq::coord::store> db;
  try {
    db = std::make_shared<cq::coord::store>((fs::path(state) / "cq.db").string());
  } catch (const std::exception& e) {
    fmt::print(stderr, "cq-coordinator: error: {}\n", e.what());
    return 1;
  }
  if (check) {
    auto damaged = db->check();
    for (auto& d : damaged)
      fmt::print("{}\n", d);
    if (damaged.empty()) {
      fmt::print("{}: no damaged rows\n", (fs::path(state) / "cq.db").string());
      return 0;
    }
    fmt::print(stderr, "cq-coordinator: {} damaged row(s) in {}\n", damaged.size(),
               (fs::path(state) / "cq.db").string());
    return 1;
  }
  try {
    if (auto why = adopt_state(state, *db); !why.empty()) {
      fmt::print(stderr, "cq-coordinator: error: {}\n", why);
      return 1;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "cq-coordinator: error: {}\n", e.what());
    return 1;
  }

  if (!add_token.empty()) {
    try {
      auto token =
          cq::coord::add_token(*db, add_token[0], add_token[1], cq::coord::new_token(), wall_ms());
      fmt::print(stderr, "Token for {} ({}) created. It is shown once, below:\n", add_token[0],
                 add_token[1]);
      fmt::print("{}\n", token);
      return 0;
    } catch (const std::exception& e) {
      fmt::print(stderr, "cq-coordinator: error: --add-token: {}\n", e.what());
      return 2;
    }
  }
  if (!init_owner.empty()) {
    try {
      auto token = cq::coord::init_owner(*db, init_owner, cq::coord::new_token(), wall_ms());
      fmt::print(stderr, "Owner '{}' created. Its token is shown once, below:\n", init_owner);
      fmt::print("{}\n", token);
      if (!install->parsed())
        return 0;
    } catch (const std::exception& e) {
      fmt::print(stderr, "cq-coordinator: error: {}\n", e.what());
      return 5;
    }
  }
  if (install->parsed()) {
    // The key the nodes will check, made now so that invite codes carry it.
    auto k = cq::bus::load_or_create_keypair((fs::path(state) / "curve.key").string());
    if (!k) {
      fmt::print(stderr, "cq-coordinator: error: {}\n", k.error().message);
      return 1;
    }
    db.reset();
    ::close(lock_fd); // the service takes the lock
    cq::coord::service_install si{state, install_opts, !install_no_start};
    if (auto why = cq::coord::install_service(si); !why.empty()) {
      fmt::print(stderr, "cq-coordinator: install: {}\n", why);
      return 1;
    }
    fmt::print(stderr,
               "\nThe coordinator {} on {} (state in {}).\n"
               "Next, as the Owner:\n"
               "  log in:         cq login {} TOKEN{}\n"
               "  add a machine:  cq node invite NAME, then on that machine:\n"
               "                  cq-node install CODE NAME\n"
               "  add a person:   cq token add NAME submitter (or operator)\n"
               "See /usr/share/doc/cq/install.md.\n",
               install_no_start ? "is ready to start" : "serves", bind, state, advertise,
               // Off loopback it always speaks CurveZMQ: clients need its key.
               is_loopback(endpoint_of(bind)) ? std::string()
                                              : fmt::format(" --server-key '{}'", k->public_key));
    if (install_no_start)
      fmt::print(stderr, "Start it with: cq-coordinator --state {} {}\n", state, install_opts);
    return 0;
  }
  auto endpoint = endpoint_of(bind);
  // SPEC section 6: CurveZMQ whenever the bind is not loopback. The keypair
  // lives in the state dir (0600), made on first use; without it there is
  // no non-loopback bind.
  std::optional<cq::bus::curve_keypair> curve;
  auto key_file = (fs::path(state) / "curve.key").string();
  if (curve_on_loopback || !is_loopback(endpoint)) {
    auto k = cq::bus::load_or_create_keypair(key_file);
    if (!k) {
      fmt::print(stderr, "cq-coordinator: error: {}{}\n", k.error().message,
                 is_loopback(endpoint) ? "" : " (a non-loopback bind needs the CURVE keypair)");
      return 2;
    }
    curve = *k;
  }

  // Block the stop signals before any thread starts, then wait for them here.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  cq::coord::limit_thread_caches(std::size_t{4} << 20);
  // A large store's recovery writes to hundreds of MB of new memory, ahead of
  // it on the core the load leaves idle (docs/adr/0064).
  {
    std::uintmax_t bytes = 0; // the store and its write-ahead log
    for (const auto* f : {"cq.db", "cq.db-wal"}) {
      std::error_code ec; // a file not there adds nothing
      auto size = fs::file_size(fs::path(state) / f, ec);
      if (!ec)
        bytes += size;
    }
    cq::coord::touch_ahead(bytes);
  }
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", cq::coord::worker_threads(std::thread::hardware_concurrency()));
  // Work sharing: idle workers block on a condition variable and wake at once
  // for a frame from the gateway thread (work stealing sleeps 10 ms at a time
  // once relaxed, which a quiet coordinator pays on every request).
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  auto wiring = cq::coord::make_zmq_wiring(sys);
  std::unique_ptr<cq::bus::gateway> gw;
  try {
    gw = std::make_unique<cq::bus::gateway>(endpoint, cq::coord::gateway_handlers(wiring), curve);
    if (!local_socket.empty())
      gw->bind_local(local_socket);
  } catch (const std::exception& e) {
    fmt::print(stderr, "cq-coordinator: error: {}\n", e.what());
    std::_Exit(1);
  }
  cq::actors::context ctx;
  if (curve)
    ctx.cfg.server_key = curve->public_key;
  {
    // Invite codes carry where to join: --advertise, else the bound address
    // (a wildcard bind cannot be joined as such: say so when inviting).
    auto bound = gw->endpoint();
    auto host_port = bound.rfind("tcp://", 0) == 0 ? bound.substr(6) : std::string();
    if (!advertise.empty())
      ctx.cfg.invite_endpoint = advertise;
    else if (!host_port.empty() && host_port.rfind("0.0.0.0:", 0) != 0 &&
             host_port.rfind("[::]:", 0) != 0 && host_port.rfind("*:", 0) != 0)
      ctx.cfg.invite_endpoint = host_port;
  }
  ctx.cfg.start_timeout = std::chrono::milliseconds(start_timeout_ms);
  ctx.cfg.heartbeat_fresh_ms = heartbeat_fresh_ms;
  ctx.cfg.lease_ms = settings.lease_ms;
  ctx.cfg.yield_grace = std::chrono::milliseconds(settings.yield_grace_ms);
  ctx.cfg.node_timeout_ms = settings.node_timeout_ms;
  ctx.cfg.lost_after_ms = settings.lost_after_ms;
  ctx.cfg.blocked_after_yield_ms = settings.blocked_after_yield_ms;
  ctx.cfg.blocked_after_other_ms = settings.blocked_after_other_ms;
  ctx.cfg.operation_window_ms = settings.operation_window_ms;
  ctx.cfg.history_window_ms = settings.history_window_ms;
  ctx.cfg.history_jobs = settings.history_jobs;
  // The api's snapshots go to the board file, the status page and the
  // notifier, whichever are on (each only copies them; none works on the
  // api's thread). Left running until the process ends.
  // The status page and notifications come from a module loaded only when
  // asked for (adapters/web.hpp): without them no HTTP or TLS library is mapped.
  cq::coord::web_sink* web = nullptr;
  if (!http.empty() || !settings.notify.empty()) {
    auto registry = std::make_shared<cq::metrics::registry>();
    cq::coord::observe::declare(*registry);
    try {
      web = cq::coord::start_web(
                {http,
                 (fs::path(state) / "cq.db").string(),
                 (fs::path(state) / "notify.cursors").string(),
                 settings.notify,
                 registry,
                 std::chrono::milliseconds(settings.chart_interval_ms),
                 {[](const std::string& t) { return cq::coord::hash_secret(t); }, read_notify_job}})
                .release();
    } catch (const std::exception& e) {
      fmt::print(stderr, "cq-coordinator: error: {}\n", e.what());
      std::_Exit(2);
    }
    if (!http.empty())
      ctx.metrics = registry;
  }
  {
    std::function<void(const std::string&)> file;
    if (!board.empty())
      file = cq::coord::board_writer(board);
    if (file || web)
      ctx.write_board = [file, web](const std::string& snapshot) {
        if (file)
          file(snapshot);
        if (web)
          web->publish(snapshot);
      };
  }
  ctx.epoch_ms = wall_ms();
  ctx.steady = sys.clock().now();
  ctx.new_id = cq::coord::new_uuid;
  ctx.new_allocation_id = cq::coord::new_uuid_v7;
  ctx.new_token = cq::coord::new_token;
  ctx.new_invite_code = cq::coord::new_invite_code;
  ctx.new_order_id = cq::coord::new_order_id;
  ctx.recovered = cq::coord::stop_prefaulting; // for the bulk load only
  ctx.make_link = cq::coord::zmq_link_factory(wiring);
  // Crash-only (ADR 0003): state that can no longer be trusted ends the
  // process; a restart recovers from what was committed.
  // The store answers every commit with an error from then on; the short
  // delay lets those errors reach their callers before the process ends.
  ctx.fatal = [](const std::string& why) {
    spdlog::critical("stopping: {}", why);
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      spdlog::shutdown();
      std::_Exit(70);
    }).detach();
  };
  std::shared_ptr<cq::actors::context> live;
  try {
    live = cq::coord::spawn_coordinator(sys, db, ctx);
  } catch (const std::exception& e) {
    fmt::print(stderr, "cq-coordinator: error: {}\n", e.what());
    std::_Exit(1);
  }
  cq::coord::connect_gateway(wiring, *gw, live->api);
  gw->start();
  spdlog::info("serving on {} with state in {}{}", gw->endpoint(), state,
               curve ? fmt::format(" (CurveZMQ, server key {})", curve->public_key)
                     : std::string(" (plain: loopback only)"));

  if (web && !http.empty())
    spdlog::info("status page and metrics on {}{}", web->url(),
                 cq::coord::is_loopback_host(http.substr(0, http.rfind(':')))
                     ? ""
                     : " (a token is needed: put TLS in front of it)");
  if (!settings.notify.empty())
    spdlog::info("{} notify rule(s) read the event stream", settings.notify.size());
  notify_service_manager(fmt::format("READY=1\nSTATUS=serving on {}", gw->endpoint()));

  // Until a stop signal, every couple of seconds the allocator's free pages
  // go back to the system: what a burst of submits or a large listing left
  // behind is not kept as RSS (docs/adr/0033).
  int sig = 0;
  for (;;) {
    timespec period{2, 0};
    sig = ::sigtimedwait(&sigs, nullptr, &period);
    if (sig > 0)
      break;
    cq::coord::release_free_memory();
  }
  spdlog::info("signal {}: stopping", sig);
  notify_service_manager("STOPPING=1");
  gw.reset();
  std::_Exit(0);
}
