#include "adapters/status_server.hpp"

#include "adapters/readonly_db.hpp"
#include "adapters/web.hpp"
#include "cq/metrics.hpp"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace cq::coord {

extern const char* const status_page_html; // status_page.cpp (generated from status_page.html)

namespace {

using json = nlohmann::json;
using steady = std::chrono::steady_clock;

constexpr std::size_t workers = 16;
constexpr std::size_t waiting_max = 32; ///< accepted connections waiting for a worker
constexpr std::size_t body_max = 64 * 1024;
constexpr auto token_cache = std::chrono::seconds(10);

const char* const login_page = R"(<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>cq: sign in</title>
<style>body{font:15px system-ui,sans-serif;max-width:26em;margin:12vh auto;padding:0 1em;color:#222}
input{font:inherit;width:100%;box-sizing:border-box;padding:.5em;margin:.4em 0}
button{font:inherit;padding:.5em 1.2em}</style></head><body>
<h1>cq status</h1><p>This coordinator's status page asks for a cq token of any role
(<code>cq token add NAME submitter</code> makes one).</p>
<form method="post" action="/login"><label>Token <input name="token" type="password"
autocomplete="current-password" required></label><button>Sign in</button></form></body></html>
)";

/// httplib's thread pool with a bound on the connections it holds: past
/// `waiting_max` waiting for a worker, the listener serves the next one
/// itself and accepts no more meanwhile, so idle or slow clients fill the
/// kernel's backlog instead of the coordinator's descriptors (which its
/// ZeroMQ sockets and its database need too).
class bounded_pool : public httplib::TaskQueue {
public:
  bounded_pool() : pool_(workers) {}
  void enqueue(std::function<void()> fn) override {
    if (waiting_.load() >= waiting_max) {
      fn();
      return;
    }
    ++waiting_;
    pool_.enqueue([this, fn = std::move(fn)] {
      --waiting_;
      fn();
    });
  }
  void shutdown() override { pool_.shutdown(); }

private:
  httplib::ThreadPool pool_;
  std::atomic<std::size_t> waiting_{0};
};

/// One point of the charts: each series' value at `at_ms`.
struct sample {
  std::int64_t at_ms = 0;
  std::map<std::string, double> values;
};

std::int64_t wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// The charts' values of a snapshot: per node its memory in use and its
/// running allocations, per lane its VRAM in use ("node/…", "node/lane/…").
sample sample_of(const json& board, std::int64_t at_ms) {
  sample s;
  s.at_ms = at_ms;
  if (!board.contains("nodes") || !board["nodes"].is_array())
    return s;
  for (auto& n : board["nodes"]) {
    auto name = n.value("name", std::string());
    auto total = n.value("mem_total_bytes", 0.0), avail = n.value("mem_available_bytes", 0.0);
    if (!n.value("online", false))
      continue;
    s.values[name + "/mem_used_bytes"] = total > avail ? total - avail : 0;
    s.values[name + "/running"] = n.value("running", 0.0);
    if (n.contains("lanes") && n["lanes"].is_array())
      for (auto& l : n["lanes"])
        s.values[name + "/" + l.value("name", std::string()) + "/vram_used_bytes"] =
            l.value("vram_used_bytes", 0.0);
  }
  return s;
}

/// The gauges of the fleet now, from the snapshot, in the text format.
std::string gauges_of(const json& board) {
  using metrics::format_labels;
  using metrics::format_value;
  std::string out;
  auto family = [&](const char* name, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
  };
  auto line = [&](const char* name, const metrics::labels& l, double v) {
    out += fmt::format("{}{} {}\n", name, format_labels(l), format_value(v));
  };
  family("cq_jobs", "Live jobs (queued, starting, running, stopping) by state and priority.");
  if (board.contains("jobs_by"))
    for (auto& e : board["jobs_by"])
      line("cq_jobs", {{"state", e.value("state", "")}, {"priority", e.value("priority", "")}},
           e.value("jobs", 0.0));
  const json nodes = board.contains("nodes") ? board["nodes"] : json::array();
  double online = 0, enabled = 0, held = 0, faulted = 0;
  for (auto& n : nodes) {
    online += n.value("online", false) ? 1 : 0;
    enabled += n.value("enabled", false) ? 1 : 0;
    held += n.contains("holds") && !n["holds"].empty() ? 1 : 0;
    faulted += n.contains("fault") && !n["fault"].is_null() ? 1 : 0;
  }
  family("cq_nodes", "Approved and pending nodes known to the coordinator.");
  line("cq_nodes", {}, static_cast<double>(nodes.size()));
  family("cq_nodes_online", "Nodes whose heartbeat is fresh.");
  line("cq_nodes_online", {}, online);
  family("cq_nodes_enabled", "Nodes that take new work.");
  line("cq_nodes_enabled", {}, enabled);
  family("cq_nodes_held", "Nodes with at least one hold waiting for a person.");
  line("cq_nodes_held", {}, held);
  family("cq_nodes_faulted", "Nodes with a latched GPU fault.");
  line("cq_nodes_faulted", {}, faulted);
  family("cq_node_up", "1 when the node's heartbeat is fresh, else 0.");
  for (auto& n : nodes)
    line("cq_node_up", {{"node", n.value("name", "")}}, n.value("online", false) ? 1 : 0);
  family("cq_node_memory_total_bytes", "The node's RAM.");
  for (auto& n : nodes)
    line("cq_node_memory_total_bytes", {{"node", n.value("name", "")}},
         n.value("mem_total_bytes", 0.0));
  family("cq_node_memory_available_bytes", "The node's MemAvailable at its last heartbeat.");
  for (auto& n : nodes)
    line("cq_node_memory_available_bytes", {{"node", n.value("name", "")}},
         n.value("mem_available_bytes", 0.0));
  family("cq_node_allocations", "Live allocations on the node.");
  for (auto& n : nodes)
    line("cq_node_allocations", {{"node", n.value("name", "")}}, n.value("running", 0.0));
  family("cq_node_holds", "Holds on the node waiting for a person.");
  for (auto& n : nodes)
    line("cq_node_holds", {{"node", n.value("name", "")}},
         n.contains("holds") ? static_cast<double>(n["holds"].size()) : 0);
  for (auto which : {"used", "total"}) {
    auto name = fmt::format("cq_lane_vram_{}_bytes", which);
    family(name.c_str(),
           *which == 'u' ? "VRAM in use on the GPU lane (by anything)." : "VRAM of the GPU lane.");
    for (auto& n : nodes)
      if (n.contains("lanes"))
        for (auto& l : n["lanes"])
          line(name.c_str(), {{"node", n.value("name", "")}, {"lane", l.value("name", "")}},
               l.value(fmt::format("vram_{}_bytes", which), 0.0));
  }
  family("cq_events_readers", "Event readers held waiting for news (cq events --follow).");
  line("cq_events_readers", {}, board.value("events_readers", 0.0));
  return out;
}

std::string cookie_token(const std::string& header) {
  constexpr std::string_view key = "cq_token=";
  std::size_t at = 0;
  while (at < header.size()) {
    while (at < header.size() && (header[at] == ' ' || header[at] == ';'))
      ++at;
    auto end = header.find(';', at);
    auto part = header.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (part.rfind(key, 0) == 0)
      return part.substr(key.size());
    if (end == std::string::npos)
      break;
    at = end + 1;
  }
  return {};
}

} // namespace

struct status_server::impl {
  status_options opts;
  std::string host;
  int port = 0;
  bool open_access = false;
  httplib::Server srv;
  std::thread listener, sampler;

  /// Guards the snapshot's pointer and version and `stopping` only: the api's
  /// publish never waits behind a request's work.
  std::mutex m;
  std::condition_variable cv;
  std::shared_ptr<const std::string> snapshot = std::make_shared<const std::string>("{}");
  std::uint64_t version = 0;
  bool stopping = false;
  /// The charts (their own lock): the points' times, and each series' values
  /// at them (NaN: none then). A value costs 8 bytes, whatever the series.
  std::mutex charts_m;
  bool sampled = false; ///< a first point was taken (under m)
  std::deque<std::int64_t> chart_t;
  std::map<std::string, std::deque<double>> charts;

  std::mutex db_m;
  readonly_db db;
  std::map<std::string, steady::time_point> known_tokens; ///< hash -> valid until

  explicit impl(status_options o) : opts(std::move(o)), db(opts.db_path) {}

  bool authorized(const httplib::Request& req) {
    if (open_access)
      return true;
    std::string token;
    if (auto a = req.get_header_value("Authorization"); a.rfind("Bearer ", 0) == 0)
      token = a.substr(7);
    else
      token = cookie_token(req.get_header_value("Cookie"));
    if (token.empty() || token.size() > 512)
      return false;
    auto hash = opts.token_hash(token);
    std::lock_guard g(db_m);
    auto now = steady::now();
    if (auto k = known_tokens.find(hash); k != known_tokens.end() && k->second > now)
      return true;
    bool found = false;
    if (auto e = db.query("SELECT 1 FROM tokens WHERE hash = ? AND revoked_ms = 0", {hash},
                          [&](const readonly_db::row&) { found = true; }))
      spdlog::warn("status server: cannot check a token: {}", *e);
    if (found) {
      if (known_tokens.size() > 1000)
        known_tokens.clear();
      known_tokens[hash] = now + token_cache;
    }
    return found;
  }

  void refuse(const httplib::Request& req, httplib::Response& res) {
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer realm=\"cq\"");
    if (req.path == "/" || req.path == "/login")
      res.set_content(login_page, "text/html; charset=utf-8");
    else
      res.set_content("401: this address needs a cq token (Authorization: Bearer TOKEN)\n",
                      "text/plain; charset=utf-8");
  }

  std::pair<std::shared_ptr<const std::string>, std::uint64_t> current() {
    std::lock_guard g(m);
    return {snapshot, version};
  }

  std::string charts_json() {
    std::lock_guard g(charts_m);
    json out;
    out["interval_ms"] = opts.chart_interval.count();
    out["t"] = chart_t;
    auto& series = out["series"] = json::object();
    for (auto& [k, values] : charts) {
      auto& arr = series[k] = json::array();
      for (auto v : values)
        arr.push_back(std::isnan(v) ? json() : json(v));
    }
    return out.dump();
  }

  void sample_now() {
    auto board = json::parse(*current().first, nullptr, false);
    if (board.is_discarded())
      return;
    auto s = sample_of(board, wall_now_ms());
    constexpr auto none = std::numeric_limits<double>::quiet_NaN();
    std::lock_guard g(charts_m);
    chart_t.push_back(s.at_ms);
    for (auto& [k, values] : charts) {
      auto v = s.values.find(k);
      values.push_back(v == s.values.end() ? none : v->second);
      if (v != s.values.end())
        s.values.erase(v);
    }
    for (auto& [k, v] : s.values) { // a series new at this point
      auto& values = charts[k] = std::deque<double>(chart_t.size() - 1, none);
      values.push_back(v);
    }
    if (chart_t.size() > opts.chart_points) {
      chart_t.pop_front();
      for (auto it = charts.begin(); it != charts.end();) {
        it->second.pop_front();
        // A series with no value left (a node gone for the whole window) goes.
        bool empty = std::all_of(it->second.begin(), it->second.end(),
                                 [](double x) { return std::isnan(x); });
        it = empty ? charts.erase(it) : std::next(it);
      }
    }
  }

  /// Before any body is read (httplib reads a POST's body before its
  /// handler): only GET, and POST /login with a stated length within the
  /// limit. A chunked or unsized body would be read whole into memory.
  httplib::Server::HandlerResponse guard(const httplib::Request& req, httplib::Response& res) {
    auto refuse_with = [&](int code, const char* why) {
      res.status = code;
      res.set_header("Connection", "close");
      res.set_content(why, "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    };
    if (req.method != "GET" && req.method != "HEAD" && req.method != "POST")
      return refuse_with(405, "405: this server is read-only\n");
    if (req.method == "POST" &&
        (req.path != "/login" || req.has_header("Transfer-Encoding") ||
         !req.has_header("Content-Length") ||
         std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > body_max))
      return refuse_with(411, "411: only POST /login, with a Content-Length of at most 64 KiB\n");
    // Served without a token (a loopback bind): only to requests addressed to
    // a loopback name, so that a web page elsewhere cannot read it through a
    // name of its own that resolves to 127.0.0.1 (DNS rebinding).
    if (open_access) {
      auto host = req.get_header_value("Host");
      if (!host.empty() && host.front() == '[')
        host =
            host.substr(0, host.find(']') == std::string::npos ? host.size() : host.find(']') + 1);
      else if (auto colon = host.find(':'); colon != std::string::npos)
        host = host.substr(0, colon);
      if (!host.empty() && !is_loopback_host(host))
        return refuse_with(403, "403: address this server by a loopback name or address\n");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  void routes() {
    srv.set_pre_routing_handler(
        [this](const httplib::Request& req, httplib::Response& res) { return guard(req, res); });
    srv.Get("/", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req))
        return refuse(req, res);
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                     "connect-src 'self'; img-src data:; form-action 'self'");
      res.set_content(status_page_html, "text/html; charset=utf-8");
    });
    srv.Get("/login", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(login_page, "text/html; charset=utf-8");
    });
    srv.Post("/login", [this](const httplib::Request& req, httplib::Response& res) {
      auto token = req.get_param_value("token");
      httplib::Request probe;
      probe.headers.emplace("Authorization", "Bearer " + token);
      if (token.empty() || !authorized(probe))
        return refuse(req, res);
      res.set_header("Set-Cookie",
                     "cq_token=" + token + "; Path=/; HttpOnly; SameSite=Strict; Max-Age=2592000");
      res.set_redirect("/", 303);
    });
    srv.Get("/api/state", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req))
        return refuse(req, res);
      // ?after=VERSION: a page that already has that snapshot gets only
      // "unchanged" (it asks every couple of seconds).
      std::uint64_t after = 0;
      if (req.has_param("after"))
        after = std::strtoull(req.get_param_value("after").c_str(), nullptr, 10);
      auto [snap, version] = current();
      res.set_header("Cache-Control", "no-store");
      if (req.has_param("after") && after == version)
        return res.set_content(
            fmt::format(R"({{"version":{},"now_ms":{},"unchanged":true}})", version, wall_now_ms()),
            "application/json");
      res.set_content(
          fmt::format(R"({{"version":{},"now_ms":{},"board":{}}})", version, wall_now_ms(), *snap),
          "application/json");
    });
    srv.Get("/api/charts", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req))
        return refuse(req, res);
      res.set_header("Cache-Control", "no-store");
      res.set_content(charts_json(), "application/json");
    });
    srv.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req))
        return refuse(req, res);
      auto board = json::parse(*current().first, nullptr, false);
      auto text = opts.metrics ? opts.metrics->render() : std::string();
      text += gauges_of(board.is_discarded() ? json::object() : board);
      res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
    });
    srv.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      if (!opts.metrics)
        return;
      static const char* const known[] = {"/", "/login", "/api/state", "/api/charts", "/metrics"};
      std::string path = "other";
      for (auto* k : known)
        if (req.path == k)
          path = k;
      opts.metrics->add("cq_http_requests_total",
                        {{"path", path}, {"code", std::to_string(res.status)}});
    });
  }
};

status_server::status_server(status_options opts) : impl_(std::make_unique<impl>(std::move(opts))) {
  auto& d = *impl_;
  if (auto why = listen_problem(d.opts.listen); !why.empty())
    throw std::runtime_error(why);
  auto colon = d.opts.listen.rfind(':');
  d.host = d.opts.listen.substr(0, colon);
  if (d.host.size() > 2 && d.host.front() == '[' && d.host.back() == ']')
    d.host = d.host.substr(1, d.host.size() - 2);
  auto port = std::strtol(d.opts.listen.c_str() + colon + 1, nullptr, 10);
  d.open_access = is_loopback_host(d.host);
  d.srv.new_task_queue = [] { return new bounded_pool(); };
  d.srv.set_payload_max_length(body_max);
  d.srv.set_read_timeout(5, 0);
  d.srv.set_write_timeout(5, 0);
  d.srv.set_keep_alive_max_count(100);
  d.routes();
  if (port == 0) {
    d.port = d.srv.bind_to_any_port(d.host);
    if (d.port <= 0)
      throw std::runtime_error(fmt::format("--http '{}': cannot bind", d.opts.listen));
  } else if (!d.srv.bind_to_port(d.host, static_cast<int>(port))) {
    throw std::runtime_error(fmt::format(
        "--http '{}': cannot bind (in use, or not this machine's address)", d.opts.listen));
  } else {
    d.port = static_cast<int>(port);
  }
  d.listener = std::thread([&d] { d.srv.listen_after_bind(); });
  d.sampler = std::thread([&d] {
    // A point every interval, the first as soon as there is a snapshot.
    std::unique_lock lk(d.m);
    while (!d.stopping) {
      d.cv.wait_for(lk, d.opts.chart_interval,
                    [&] { return d.stopping || (!d.sampled && d.version > 0); });
      if (d.stopping || d.version == 0)
        continue;
      d.sampled = true;
      lk.unlock();
      d.sample_now();
      lk.lock();
    }
  });
}

status_server::~status_server() {
  auto& d = *impl_;
  {
    std::lock_guard g(d.m);
    d.stopping = true;
  }
  d.cv.notify_all();
  d.srv.stop();
  if (d.listener.joinable())
    d.listener.join();
  if (d.sampler.joinable())
    d.sampler.join();
}

void status_server::publish(const std::string& snapshot) {
  auto& d = *impl_;
  auto copy = std::make_shared<const std::string>(snapshot); // outside the lock
  {
    std::lock_guard g(d.m);
    d.snapshot = std::move(copy);
    ++d.version;
  }
  d.cv.notify_all();
}

std::string status_server::url() const {
  auto h = impl_->host.find(':') != std::string::npos ? "[" + impl_->host + "]" : impl_->host;
  return fmt::format("http://{}:{}", h, impl_->port);
}

} // namespace cq::coord
