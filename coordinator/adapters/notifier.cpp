#include "adapters/notifier.hpp"

#include "adapters/files.hpp"
#include "adapters/readonly_db.hpp"
#include "cq/metrics.hpp"

#include <curl/curl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>

extern char** environ;

namespace cq::coord {

namespace {

using json = nlohmann::json;

constexpr std::size_t batch_rows = 200;
constexpr auto idle_poll = std::chrono::seconds(2);
constexpr auto command_timeout = std::chrono::seconds(30);
constexpr long webhook_timeout_s = 10;
constexpr int backoff_max_s = 60;

bool is_node_kind(const std::string& k) {
  return k == "node_down" || k == "fault";
}

/// A person's line for an event: what the chat message or the email says.
std::string text_of(const json& e) {
  auto kind = e.value("kind", std::string());
  if (is_node_kind(kind))
    return fmt::format(
        "cq: node {} {}{}", e.value("node", std::string()),
        kind == "fault" ? "latched a GPU fault" : "is down",
        e.value("detail", std::string()).empty() ? "" : ": " + e.value("detail", std::string()));
  auto detail = e.value("detail", std::string());
  return fmt::format("cq: job {} ({}) {}{}", e.value("name", std::string()),
                     e.value("owner", std::string()), kind, detail.empty() ? "" : ": " + detail);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// JSON text of `j`; bytes that are not UTF-8 (a detail a node sent) become
/// U+FFFD instead of throwing.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::size_t discard(char*, std::size_t size, std::size_t n, void*) {
  return size * n;
}

/// POSTs the event to `url` in `format`; the error, or "".
std::string post(const std::string& url, const std::string& format, const json& e) {
  std::string body, type = "application/json";
  std::string title;
  if (format == "slack") {
    body = dump(json{{"text", text_of(e)}});
  } else if (format == "ntfy") {
    body = text_of(e);
    type = "text/plain; charset=utf-8";
    title = "Title: cq: " + e.value("kind", std::string());
  } else {
    body = dump(e);
  }
  CURL* c = curl_easy_init();
  if (!c)
    return "libcurl could not start";
  curl_slist* headers = curl_slist_append(nullptr, ("Content-Type: " + type).c_str());
  if (!title.empty())
    headers = curl_slist_append(headers, title.c_str());
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(c, CURLOPT_TIMEOUT, webhook_timeout_s);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "cq-coordinator");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
  auto rc = curl_easy_perform(c);
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(headers);
  curl_easy_cleanup(c);
  if (rc != CURLE_OK)
    return curl_easy_strerror(rc);
  if (code < 200 || code > 299)
    return fmt::format("the receiver answered HTTP {}", code);
  return {};
}

/// Runs the rule's command with the event on its stdin; the error, or "".
std::string run(const std::vector<std::string>& argv_in, const json& e) {
  auto payload = dump(e);
  std::vector<std::string> args;
  for (auto& a : argv_in)
    args.push_back(expand_argument(a, payload));
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  int in[2];
  if (::pipe2(in, O_CLOEXEC) != 0)
    return std::strerror(errno);
  // The command starts clean: none of the coordinator's descriptors (its
  // listening sockets would outlive it in a stuck child), its signals
  // unblocked and at their defaults (the coordinator blocks TERM and INT),
  // in a process group of its own that a timeout ends whole.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &defaults);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, argv[0], &fa, &at, argv.data(), environ);
  posix_spawnattr_destroy(&at);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  if (rc != 0) {
    ::close(in[1]);
    return fmt::format("cannot run {}: {}", args[0], std::strerror(rc));
  }
  ::signal(SIGPIPE, SIG_IGN);
  std::size_t off = 0;
  while (off < payload.size()) {
    auto n = ::write(in[1], payload.data() + off, payload.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break; // it does not read its stdin: its exit status decides
    off += static_cast<std::size_t>(n);
  }
  ::close(in[1]);
  auto deadline = std::chrono::steady_clock::now() + command_timeout;
  int status = 0;
  for (;;) {
    auto w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid)
      break;
    if (w < 0 && errno != EINTR)
      return std::strerror(errno);
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL); // its whole group: a pipeline's other commands too
      ::waitpid(pid, &status, 0);
      return fmt::format("{} ran past {} s and was stopped", args[0], command_timeout.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return {};
  if (WIFEXITED(status))
    return fmt::format("{} exited with {}", args[0], WEXITSTATUS(status));
  return fmt::format("{} was ended by signal {}", args[0], WTERMSIG(status));
}

} // namespace

std::string expand_argument(const std::string& arg, const std::string& event_json) {
  auto e = json::parse(event_json, nullptr, false);
  if (e.is_discarded() || !e.is_object())
    return arg;
  std::string out;
  for (std::size_t i = 0; i < arg.size(); ++i) {
    auto close = arg[i] == '{' ? arg.find('}', i) : std::string::npos;
    if (close == std::string::npos) {
      out += arg[i];
      continue;
    }
    auto key = arg.substr(i + 1, close - i - 1);
    static const char* const keys[] = {"kind", "job", "name", "owner", "state", "seq", "node"};
    if (key == "text") {
      out += text_of(e);
    } else if (std::find(std::begin(keys), std::end(keys), key) != std::end(keys)) {
      auto& v = e[key];
      out += v.is_string() ? v.get<std::string>() : v.is_null() ? std::string() : v.dump();
    } else {
      out += arg.substr(i, close - i + 1);
    }
    i = close;
  }
  return out;
}

struct notifier::impl {
  notifier_options opts;
  std::mutex m;
  std::condition_variable cv;
  bool stopping = false;
  std::uint64_t news = 0;
  std::map<std::string, std::deque<json>> node_events; ///< by rule
  json last_nodes;                                     ///< name -> {down, fault}
  bool wants_nodes = false;
  std::string snapshot; ///< the newest one the node watcher has not read ("": none)

  std::mutex cursor_m;
  json cursors = json::object(); ///< rule name -> last event id handled

  std::vector<std::thread> threads;

  explicit impl(notifier_options o) : opts(std::move(o)) {
    auto text = read_file(opts.cursor_path);
    if (!text.empty()) {
      auto c = json::parse(text, nullptr, false);
      if (c.is_object())
        cursors = c;
      else
        spdlog::warn("notify: {} is not JSON; every rule starts at the newest event",
                     opts.cursor_path);
    }
  }

  void save_cursor(const std::string& rule, std::int64_t id) {
    std::lock_guard g(cursor_m);
    cursors[rule] = id;
    if (auto e = replace_file(opts.cursor_path, cursors.dump(), 0600); !e.empty())
      spdlog::warn("notify: {}", e);
  }

  /// Waits `d` or until stopping; false when stopping.
  bool pause(std::chrono::milliseconds d) {
    std::unique_lock lk(m);
    cv.wait_for(lk, d, [&] { return stopping; });
    return !stopping;
  }

  /// Delivers `e` for `r` until it is delivered or the notifier stops; false
  /// when it stopped first.
  bool deliver(const notify_rule& r, const json& e) {
    int backoff = 1;
    for (;;) {
      auto error = r.webhook.empty() ? run(r.command, e) : post(r.webhook, r.format, e);
      if (error.empty()) {
        if (opts.metrics)
          opts.metrics->add("cq_notify_deliveries_total", {{"rule", r.name}});
        return true;
      }
      if (opts.metrics)
        opts.metrics->add("cq_notify_failures_total", {{"rule", r.name}});
      spdlog::warn("notify {}: {} of {} not delivered: {} (again in {} s)", r.name,
                   e.value("kind", std::string()),
                   e.contains("job") ? e.value("job", std::string())
                                     : e.value("node", std::string()),
                   error, backoff);
      if (!pause(std::chrono::seconds(backoff)))
        return false;
      backoff = std::min(backoff * 2, backoff_max_s);
    }
  }

  bool matches(const notify_rule& r, const json& e, bool notify_flag) {
    auto kind = e.value("kind", std::string());
    if (std::find(r.on.begin(), r.on.end(), kind) == r.on.end())
      return false;
    if (is_node_kind(kind))
      return true;
    auto in = [](const std::vector<std::string>& list, const std::string& v) {
      return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
    };
    if (!in(r.owners, e.value("owner", std::string())) ||
        !in(r.priorities, e.value("priority", std::string())))
      return false;
    if (!r.names.empty() && std::none_of(r.names.begin(), r.names.end(), [&](const std::string& g) {
          return ::fnmatch(g.c_str(), e.value("name", std::string()).c_str(), 0) == 0;
        }))
      return false;
    return !r.per_job || notify_flag;
  }

  /// Runs `r`'s loop; an exception (which should not happen) is logged and
  /// the loop starts again after a pause, from the cursor it saved.
  void work(const notify_rule& r) {
    for (;;) {
      try {
        work_once(r);
        return;
      } catch (const std::exception& e) {
        spdlog::error("notify {}: {}; starting again in 10 s", r.name, e.what());
        if (opts.metrics)
          opts.metrics->add("cq_notify_failures_total", {{"rule", r.name}});
      }
      if (!pause(std::chrono::seconds(10)))
        return;
    }
  }

  void work_once(const notify_rule& r) {
    readonly_db db(opts.db_path);
    std::int64_t cursor = -1;
    {
      std::lock_guard g(cursor_m);
      if (cursors.contains(r.name) && cursors[r.name].is_number_integer())
        cursor = cursors[r.name].get<std::int64_t>();
    }
    while (cursor < 0) { // a new rule starts at the newest event: no flood of the past
      std::int64_t newest = 0;
      auto e = db.query("SELECT coalesce(max(id), 0) FROM events", {},
                        [&](const readonly_db::row& row) { newest = as_int(row[0]); });
      if (!e) {
        cursor = newest;
        save_cursor(r.name, cursor);
      } else if (!pause(std::chrono::seconds(1))) {
        return;
      }
    }
    for (;;) {
      std::uint64_t seen;
      {
        std::lock_guard g(m);
        if (stopping)
          return;
        seen = news;
      }
      for (;;) { // node events first (they are in memory only)
        json e;
        {
          std::lock_guard g(m);
          auto& q = node_events[r.name];
          if (q.empty())
            break;
          e = q.front();
        }
        if (!deliver(r, e))
          return;
        std::lock_guard g(m);
        node_events[r.name].pop_front();
      }
      std::vector<std::pair<json, bool>> batch; // event, the job's notify flag
      std::vector<std::int64_t> ids;
      auto error = db.query(
          "SELECT e.id, e.job, e.seq, e.kind, e.at_ms, e.detail, j.state, j.finished_ms, "
          "j.priority, j.record FROM events e LEFT JOIN jobs j ON j.seq = e.job_seq AND j.id = "
          "e.job "
          "WHERE e.id > ? "
          "ORDER BY e.id LIMIT ?",
          {cursor, static_cast<std::int64_t>(batch_rows)}, [&](const readonly_db::row& row) {
            json e{{"kind", as_text(row[3])}, {"cursor", as_int(row[0])},
                   {"job", as_text(row[1])},  {"seq", as_int(row[2])},
                   {"at_ms", as_int(row[4])}, {"detail", as_text(row[5])}};
            bool flag = false;
            if (auto* rec = std::get_if<std::string>(&row[9])) {
              try {
                auto j = opts.read_job(*rec, as_text(row[1]), as_text(row[6]), as_int(row[7]),
                                       as_text(row[8]));
                e["name"] = j.name, e["owner"] = j.owner, e["state"] = j.state;
                e["priority"] = j.priority, e["node"] = j.node, e["reason"] = j.reason;
                e["exit_code"] = j.exit_code ? json(*j.exit_code) : json();
                flag = j.notify;
              } catch (const std::exception& x) {
                spdlog::warn("notify {}: job {}: {}", r.name, as_text(row[1]), x.what());
              }
            }
            e["text"] = text_of(e);
            ids.push_back(as_int(row[0]));
            batch.emplace_back(std::move(e), flag);
          });
      if (error) {
        spdlog::warn("notify {}: cannot read events: {}", r.name, *error);
        if (!pause(std::chrono::seconds(2)))
          return;
        continue;
      }
      bool skipped = false;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (!matches(r, batch[i].first, batch[i].second)) {
          cursor = ids[i];
          skipped = true;
          continue;
        }
        if (!deliver(r, batch[i].first)) {
          if (skipped)
            save_cursor(r.name, cursor);
          return;
        }
        cursor = ids[i];
        save_cursor(r.name, cursor);
        skipped = false;
      }
      if (skipped)
        save_cursor(r.name, cursor);
      if (batch.size() == batch_rows)
        continue;
      std::unique_lock lk(m);
      cv.wait_for(lk, idle_poll,
                  [&] { return stopping || news != seen || !node_events[r.name].empty(); });
    }
  }

  void nodes_changed(const std::string& snapshot) {
    auto board = json::parse(snapshot, nullptr, false);
    if (board.is_discarded() || !board.contains("nodes"))
      return;
    json now = json::object();
    std::vector<json> events;
    for (auto& n : board["nodes"]) {
      auto name = n.value("name", std::string());
      bool down = n.value("down", false);
      bool fault = n.contains("fault") && !n["fault"].is_null();
      now[name] = {{"down", down}, {"fault", fault}};
      if (!last_nodes.is_object() || !last_nodes.contains(name))
        continue; // the first sight of a node is no change
      auto& was = last_nodes[name];
      auto at = board.value("at_ms", std::int64_t{0});
      if (down && !was.value("down", false))
        events.push_back({{"kind", "node_down"},
                          {"node", name},
                          {"at_ms", at},
                          {"detail", "no heartbeat for the node timeout"}});
      if (fault && !was.value("fault", false))
        events.push_back({{"kind", "fault"},
                          {"node", name},
                          {"at_ms", at},
                          {"detail", n["fault"].value("message", std::string())}});
    }
    last_nodes = now;
    if (events.empty())
      return;
    std::lock_guard g(m);
    for (auto& e : events) {
      e["text"] = text_of(e);
      for (auto& r : opts.rules)
        if (std::find(r.on.begin(), r.on.end(), e.value("kind", std::string())) != r.on.end())
          node_events[r.name].push_back(e);
    }
  }
};

notifier::notifier(notifier_options opts) : impl_(std::make_unique<impl>(std::move(opts))) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  auto& d = *impl_;
  for (auto& r : d.opts.rules) {
    d.wants_nodes = d.wants_nodes || std::any_of(r.on.begin(), r.on.end(), is_node_kind);
    d.threads.emplace_back([&d, &r] { d.work(r); });
  }
  if (d.wants_nodes) // reads the snapshots on a thread of its own, never the api's
    d.threads.emplace_back([&d] {
      std::unique_lock lk(d.m);
      for (;;) {
        d.cv.wait(lk, [&] { return d.stopping || !d.snapshot.empty(); });
        if (d.stopping)
          return;
        auto s = std::move(d.snapshot);
        d.snapshot.clear();
        lk.unlock();
        d.nodes_changed(s);
        lk.lock();
        d.cv.notify_all();
      }
    });
}

notifier::~notifier() {
  auto& d = *impl_;
  {
    std::lock_guard g(d.m);
    d.stopping = true;
  }
  d.cv.notify_all();
  for (auto& t : d.threads)
    t.join();
}

void notifier::publish(const std::string& snapshot) {
  auto& d = *impl_;
  {
    std::lock_guard g(d.m);
    ++d.news;
    if (d.wants_nodes)
      d.snapshot = snapshot;
  }
  d.cv.notify_all();
}

} // namespace cq::coord
