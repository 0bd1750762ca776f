// cq up / cq down: a coordinator and a node for this machine, on loopback.
//
// Layout under the state dir (default $HOME/.local/share/cq):
//   coordinator/       the coordinator's state (--state of cq-coordinator)
//   coordinator.log    its stdout and stderr, appended
//   coordinator.pid    its pid while `cq up` considers it running
//   node/              the node's state; node/node.toml exists once it joined
//   node.log, node.pid the same for cq-node
//   node.name          the name the node joined under (so a later `cq up`
//                      without --node-name waits for the right node)
// `cq up` is idempotent: it starts only what does not run and reuses the state.

#include "commands.hpp"
#include "cq/cli/config.hpp"
#include "cq/cli/escape.hpp"
#include "cq/text.hpp"
#include "output.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace cq::cli {

namespace {

namespace fs = std::filesystem;

constexpr std::int64_t start_deadline_ms = 10'000; ///< for each daemon to come up
constexpr std::int64_t poll_ms = 50;
constexpr std::int64_t stop_deadline_ms = 5'000; ///< for each daemon to exit on SIGTERM
constexpr std::chrono::milliseconds probe_timeout{100};
constexpr std::chrono::milliseconds call_timeout{5000};

struct up_paths {
  explicit up_paths(const std::string& state_dir) : state(state_dir) {}
  fs::path state;
  fs::path coordinator_state() const { return state / "coordinator"; }
  fs::path coordinator_log() const { return state / "coordinator.log"; }
  fs::path coordinator_pid() const { return state / "coordinator.pid"; }
  fs::path node_state() const { return state / "node"; }
  fs::path node_toml() const { return state / "node" / "node.toml"; }
  fs::path node_log() const { return state / "node.log"; }
  fs::path node_pid() const { return state / "node.pid"; }
  fs::path node_name() const { return state / "node.name"; }
  /// Where this state's coordinator serves (a later cq up without --port).
  fs::path endpoint() const { return state / "endpoint"; }
  /// The coordinator's Unix socket for this machine's clients; "" where the
  /// path is too long for one (cq then uses TCP).
  std::string local_socket() const {
    auto path = (state / "coordinator" / "cq.sock").string();
    return path.size() <= 107 ? path : std::string();
  }
};

/// Prints one progress line of `cq up`/`cq down` right away (escaped: it
/// names paths and nodes).
template <class... Ts>
void step(fmt::format_string<Ts...> f, Ts&&... args) {
  print_line(fmt::format(f, std::forward<Ts>(args)...));
  std::fflush(stdout);
}

bus::error_info fail(errc code, std::string message) {
  return {code, std::move(message)};
}

/// The state dir: --state made absolute, else $HOME/.local/share/cq.
bus::result<fs::path> state_dir(const std::string& given) {
  if (!given.empty())
    return fs::absolute(given).lexically_normal();
  auto home = home_dir();
  if (home.empty())
    return fail(errc::internal, "cannot find HOME: pass --state DIR");
  return fs::path(home) / ".local" / "share" / "cq";
}

/// Creates `dir` and its parents; a folder created here gets `mode`.
bus::result<bool> make_dir(const fs::path& dir, mode_t mode) {
  std::error_code ec;
  if (fs::is_directory(dir, ec))
    return true;
  fs::create_directories(dir.parent_path(), ec);
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST)
    return fail(errc::internal,
                fmt::format("cannot create {}: {}", dir.string(), std::strerror(errno)));
  return true;
}

bool dir_missing_or_empty(const fs::path& dir) {
  std::error_code ec;
  return !fs::exists(dir, ec) || fs::is_empty(dir, ec);
}

/// The pid in `file`, or 0 if there is none.
int read_pid(const fs::path& file) {
  auto line = read_first_line(file.string());
  int pid = 0;
  if (!line || std::from_chars(line->data(), line->data() + line->size(), pid).ec != std::errc())
    return 0;
  return pid > 0 ? pid : 0;
}

/// The last non-empty line of a log file (at most its last 4 KiB are read).
std::string last_log_line(const fs::path& log) {
  std::ifstream in(log, std::ios::binary);
  if (!in)
    return {};
  in.seekg(0, std::ios::end);
  auto size = static_cast<std::streamoff>(in.tellg());
  auto from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r' || tail.back() == ' '))
    tail.pop_back();
  auto nl = tail.rfind('\n');
  return nl == std::string::npos ? tail : tail.substr(nl + 1);
}

/// "; last log line: ..." for error messages, or "" when the log is empty.
std::string log_hint(const fs::path& log) {
  auto line = last_log_line(log);
  return line.empty() ? fmt::format(" (log: {})", log.string())
                      : fmt::format(" (log: {}; last line: {})", log.string(), line);
}

bus::result<std::string> find(std::string_view program) {
  auto path = sys::find_program(program);
  if (path.empty())
    return fail(errc::internal,
                fmt::format("cannot find {} beside cq, in the build tree or on PATH", program));
  return path;
}

/// True if the coordinator at `c` answers: any reply, even an error one
/// (unauthenticated, say), proves it runs; only `unavailable` means it does not.
bool answers(bus::client& c) {
  auto r = c.call<bus::node_ls_rep>(bus::node_ls_req{});
  return r || r.error().code != errc::unavailable;
}

/// Starts `argv` detached with its log, records its pid in `pid_file`.
bus::result<int> start_daemon(const std::vector<std::string>& argv, const fs::path& log,
                              const fs::path& pid_file) {
  auto pid = sys::spawn_detached(argv, log.string());
  if (!pid)
    return pid.error();
  if (auto w = sys::write_file(pid_file, fmt::format("{}\n", *pid), 0644); !w)
    return w.error();
  return *pid;
}

/// Creates the owner: runs `cq-coordinator --init-owner`, stores its token
/// (0600, in a 0700 config dir) and the endpoint.
bus::result<bool> init_owner(const up_paths& p, const std::string& cfg_dir,
                             const std::string& endpoint) {
  auto bin = find("cq-coordinator");
  if (!bin)
    return bin.error();
  auto user = sys::user_name();
  auto out =
      sys::run_capture({*bin, "--state", p.coordinator_state().string(), "--init-owner", user},
                       p.coordinator_log().string(), 30'000);
  if (!out)
    return fail(out.error().code, out.error().message + log_hint(p.coordinator_log()));
  // The token is the last line of stdout.
  std::string_view text = *out;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.remove_suffix(1);
  auto token = text.substr(text.rfind('\n') == std::string_view::npos ? 0 : text.rfind('\n') + 1);
  if (token.empty())
    return fail(errc::internal,
                "cq-coordinator --init-owner printed no token" + log_hint(p.coordinator_log()));
  if (auto d = make_dir(cfg_dir, 0700); !d)
    return d.error();
  auto tpath = token_path(cfg_dir);
  if (auto w = sys::write_file(tpath, fmt::format("{}\n", token), 0600, true); !w)
    return w.error();
  if (auto w = sys::write_file(fs::path(cfg_dir) / "url", endpoint + "\n", 0644); !w)
    return w.error();
  step("coordinator: created owner {} (token in {})", user, tpath);
  return true;
}

/// Makes sure the coordinator runs and answers at `endpoint` (with its status page on
/// 127.0.0.1:`http_port` when it starts one; 0: none). True when it started it.
bus::result<bool> ensure_coordinator(const up_paths& p, const std::string& cfg_dir,
                                     const std::string& endpoint, std::uint16_t http_port) {
  auto tpath = token_path(cfg_dir);
  bool has_token = fs::exists(tpath);
  auto token = has_token ? read_token(cfg_dir) : bus::result<std::string>(std::string());
  if (!token)
    return token.error();
  bus::client probe(endpoint, *token, std::chrono::milliseconds(300));
  if (answers(probe)) {
    if (!has_token)
      return fail(
          errc::unauthenticated,
          fmt::format("a coordinator answers at {} but there is no token at {}", endpoint, tpath));
    step("coordinator: already running at {}", endpoint);
    return false;
  }
  if (!has_token) {
    if (!dir_missing_or_empty(p.coordinator_state()))
      return fail(errc::unauthenticated,
                  fmt::format("no token at {} but the coordinator state {} already exists; restore "
                              "the token file, or move that state away to start afresh",
                              tpath, p.coordinator_state().string()));
    if (auto r = init_owner(p, cfg_dir, endpoint); !r)
      return r.error();
  } else if (dir_missing_or_empty(p.coordinator_state())) {
    return fail(errc::invalid_state,
                fmt::format("the token at {} belongs to another coordinator: the state {} is empty "
                            "(use CQ_CONFIG_DIR for a separate identity, or remove the token)",
                            tpath, p.coordinator_state().string()));
  }
  int pid = read_pid(p.coordinator_pid());
  bool started_here = false;
  if (sys::runs_program(pid, "cq-coordinator")) {
    // This state's coordinator serves elsewhere (cq up --port P2 while it
    // serves P1): it will not answer here, so say so now.
    if (auto url = read_first_line((fs::path(cfg_dir) / "url").string());
        url && !url->empty() && *url != endpoint)
      return fail(errc::invalid_state,
                  fmt::format("the coordinator of {} already runs (pid {}) at {}; cq down stops "
                              "it (running jobs keep running), then cq up --port serves on "
                              "another port",
                              p.state.string(), pid, *url));
    step("coordinator: process {} runs; waiting for it to answer", pid);
  } else {
    auto bin = find("cq-coordinator");
    if (!bin)
      return bin.error();
    std::vector<std::string> argv = {*bin, "--state", p.coordinator_state().string(), "--bind",
                                     endpoint};
    if (auto sock = p.local_socket(); !sock.empty())
      argv.insert(argv.end(), {"--local-socket", sock});
    if (http_port)
      argv.insert(argv.end(), {"--http", fmt::format("127.0.0.1:{}", http_port)});
    auto started = start_daemon(argv, p.coordinator_log(), p.coordinator_pid());
    if (!started)
      return started.error();
    pid = *started;
    started_here = true;
  }
  auto tok = read_token(cfg_dir);
  if (!tok)
    return tok.error();
  bus::client c(endpoint, *tok, probe_timeout);
  auto deadline = sys::mono_ms() + start_deadline_ms;
  for (;;) {
    if (answers(c))
      break;
    if (!sys::pid_alive(pid))
      return fail(errc::internal, "cq-coordinator exited" + log_hint(p.coordinator_log()));
    if (sys::mono_ms() >= deadline)
      return fail(errc::unavailable,
                  fmt::format("cq-coordinator (pid {}) does not answer at {} after {} s{}", pid,
                              endpoint, start_deadline_ms / 1000, log_hint(p.coordinator_log())));
    sys::sleep_ms(poll_ms);
  }
  step("coordinator: running at {} (pid {}, log {})", endpoint, pid, p.coordinator_log().string());
  return started_here;
}

/// Makes sure this machine's node joined, runs, is approved and online.
bus::result<bool> ensure_node(const up_paths& p, const std::string& endpoint,
                              const std::string& name, bus::client& c) {
  int pid = read_pid(p.node_pid());
  bool running = sys::runs_program(pid, "cq-node");
  if (running) {
    step("node {}: already running (pid {})", name, pid);
  } else {
    auto bin = find("cq-node");
    if (!bin)
      return bin.error();
    std::vector<std::string> argv;
    bool join = !fs::exists(p.node_toml());
    if (join) {
      // No local node state: a node of this name that joined before lived in a
      // state dir that is gone, so its identity is replaced (old token revoked).
      auto inv = c.call<bus::node_invite_rep>(bus::node_invite_req{name, {}});
      if (!inv && inv.error().code == errc::already_exists) {
        step("node {}: its earlier state is gone; replacing its identity", name);
        inv = c.call<bus::node_invite_rep>(bus::node_invite_req{name, true});
      }
      if (!inv)
        return fail(inv.error().code, fmt::format("invite node {}: {}", name, inv.error().message));
      if (auto w = sys::write_file(p.node_name(), name + "\n", 0644); !w)
        return w.error();
      argv = {*bin, "--join", endpoint, inv->code, name, "--state", p.node_state().string()};
    } else {
      argv = {*bin, "--state", p.node_state().string()};
    }
    auto started = start_daemon(argv, p.node_log(), p.node_pid());
    if (!started)
      return started.error();
    pid = *started;
    step("node {}: {} (pid {}, log {})", name, join ? "joining" : "started", pid,
         p.node_log().string());
  }
  auto deadline = sys::mono_ms() + start_deadline_ms;
  bool approved_here = false;
  for (;;) {
    auto ls = c.call<bus::node_ls_rep>(bus::node_ls_req{});
    if (!ls)
      return ls.error();
    const bus::node_info* me = nullptr;
    for (const auto& n : ls->nodes)
      if (n.name == name)
        me = &n;
    if (me && me->state == "pending" && !approved_here) {
      auto ap = c.call<bus::node_rep>(bus::node_approve_req{name});
      if (!ap)
        return fail(ap.error().code, fmt::format("approve node {}: {}", name, ap.error().message));
      approved_here = true;
      step("node {}: approved", name);
      continue;
    }
    if (me && me->state == "approved" && me->online)
      break;
    if (!sys::pid_alive(pid))
      return fail(errc::internal, fmt::format("cq-node exited{}", log_hint(p.node_log())));
    if (sys::mono_ms() >= deadline)
      return fail(
          errc::unavailable,
          fmt::format("node {} is not online and approved after {} s (seen: {}){}", name,
                      start_deadline_ms / 1000,
                      me ? fmt::format("{}, {}", me->state, me->online ? "online" : "offline")
                         : std::string("not registered"),
                      log_hint(p.node_log())));
    sys::sleep_ms(poll_ms);
  }
  step("node {}: online", name);
  return true;
}

} // namespace

int run_up(const up_options& o) {
  // Before anything starts (a coordinator left running by a refusal).
  if (!o.node_name.empty() && !valid_name(o.node_name))
    return report_error({errc::invalid_argument,
                         fmt::format("--node-name: '{}' is not a name: use 1-64 letters, digits, "
                                     "'.', '-' or '_'",
                                     escape_control(o.node_name.substr(0, 64)))},
                        false);
  auto state = state_dir(o.state_dir);
  if (!state)
    return report_error(state.error(), false);
  up_paths p(state->string());
  auto cfg_dir = config_dir();
  if (!cfg_dir)
    return report_error(cfg_dir.error(), false);
  auto endpoint = fmt::format("tcp://127.0.0.1:{}", o.port);
  // Without --port, the port an earlier `cq up --port N` of this state
  // chose stands (running or not): its node was invited there. The state
  // keeps it (the config's url may name another coordinator: cq login).
  auto kept = read_first_line(p.endpoint().string());
  if (!o.port_given && !dir_missing_or_empty(p.coordinator_state()) && kept &&
      kept->starts_with("tcp://127.0.0.1:"))
    endpoint = *kept;
  for (const auto& d : {p.state, p.coordinator_state(), p.node_state()})
    if (auto r = make_dir(d, 0700); !r)
      return report_error(r.error(), false);

  auto coordinator = ensure_coordinator(p, *cfg_dir, endpoint, o.http_port);
  if (!coordinator)
    return report_error(coordinator.error(), false);
  if (!kept || *kept != endpoint)
    if (auto w = sys::write_file(p.endpoint(), endpoint + "\n", 0644); !w)
      return report_error(w.error(), false);

  // Later `cq` calls reach this coordinator through <config>/url.
  auto url_file = fs::path(*cfg_dir) / "url";
  if (auto cur = read_first_line(url_file.string()); !cur || *cur != endpoint) {
    if (auto w = sys::write_file(url_file, endpoint + "\n", 0644); !w)
      return report_error(w.error(), false);
    step("config: endpoint {} written to {}", endpoint, url_file.string());
  }

  // ... and through its Unix socket when it serves one (<config>/local).
  auto local_file = fs::path(*cfg_dir) / "local";
  if (auto sock = p.local_socket(); !sock.empty() && sys::unix_socket_accepts(sock)) {
    if (auto w = sys::write_file(local_file, local_record(sock, endpoint), 0644); !w)
      return report_error(w.error(), false);
  }

  auto token = read_token(*cfg_dir);
  if (!token)
    return report_error(token.error(), false);
  bus::client c(endpoint, *token, call_timeout);
  auto name = o.node_name;
  if (name.empty()) {
    auto saved = read_first_line(p.node_name().string());
    name = saved && !saved->empty() ? *saved : sys::host_name();
  }
  if (auto r = ensure_node(p, endpoint, name, c); !r)
    return report_error(r.error(), false);
  if (o.http_port && *coordinator)
    step("status page: http://127.0.0.1:{}/ (metrics at /metrics)", o.http_port);
  else if (o.http_port)
    step("status page: http://127.0.0.1:{}/ if the coordinator already running was started "
         "with it (else cq down, then cq up --http {})",
         o.http_port, o.http_port);
  step("ready: submit with `cq submit -- COMMAND`");
  return 0;
}

int run_down(const std::string& given_state) {
  auto state = state_dir(given_state);
  if (!state)
    return report_error(state.error(), false);
  up_paths p(state->string());
  // The node first, so its last reports can still reach the coordinator.
  struct daemon {
    const char* label;
    const char* program;
    fs::path pid_file;
  };
  std::string stuck;
  bool stopped = false;
  for (const auto& d : {daemon{"node", "cq-node", p.node_pid()},
                        daemon{"coordinator", "cq-coordinator", p.coordinator_pid()}}) {
    int pid = read_pid(d.pid_file);
    if (!sys::runs_program(pid, d.program)) {
      std::error_code ec;
      fs::remove(d.pid_file, ec);
      step("{}: not running", d.label);
      continue;
    }
    sys::terminate(pid);
    auto deadline = sys::mono_ms() + stop_deadline_ms;
    while (sys::pid_alive(pid) && sys::mono_ms() < deadline)
      sys::sleep_ms(poll_ms);
    if (sys::pid_alive(pid)) {
      stuck += fmt::format("{}{} (pid {})", stuck.empty() ? "" : ", ", d.label, pid);
      continue;
    }
    std::error_code ec;
    fs::remove(d.pid_file, ec);
    step("{}: stopped (pid {})", d.label, pid);
    stopped = true;
  }
  if (!stuck.empty())
    return report_error({errc::internal, fmt::format("still running {} s after SIGTERM: {}",
                                                     stop_deadline_ms / 1000, stuck)},
                        false);
  if (stopped) // said of nothing when nothing ran
    step("jobs that were running keep running; cq up adopts them again (cq cancel stops a job)");
  return 0;
}

} // namespace cq::cli
