#pragma once
// The coordinator's web side, loaded only when asked for: the status server
// (--http, status_server.hpp) and the notifier ([[notify]], notifier.hpp)
// live in a module of their own, cq-coordinator-web.so, with cpp-httplib and
// libcurl (and through them OpenSSL). A coordinator without --http or
// notify rules never maps those libraries: about 4.6 MB of resident memory
// that the SPEC's bound at 10,000 jobs has no room for (docs/adr/0038).

#include "config/config.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cq::metrics {
class registry;
}

namespace cq::coord {

/// A job's fields a notification carries, from its stored row.
struct notify_job {
  std::string name, owner, state, priority, node, reason;
  std::optional<std::int64_t> exit_code;
  bool notify = false; ///< cq submit --notify
};

/// The program's own code the module calls (the module links no store and
/// no wire code of its own).
struct web_callbacks {
  /// The stored hash of a token (auth/auth.hpp's hash_secret).
  std::function<std::string(const std::string& token)> token_hash;
  /// A job's fields from its row's record and columns
  /// (store/job_record.hpp); throws std::runtime_error for a bad record.
  std::function<notify_job(const std::string& record, const std::string& id,
                           const std::string& state, std::int64_t finished_ms,
                           const std::string& priority)>
      read_job;
};

/// What the web side is asked to run.
struct web_options {
  std::string http;        ///< --http HOST:PORT; "" = no status server
  std::string db_path;     ///< the state database (read only)
  std::string cursor_path; ///< the notify rules' cursors
  std::vector<notify_rule> rules;
  std::shared_ptr<metrics::registry> metrics;
  std::chrono::milliseconds chart_interval{std::chrono::seconds(10)};
  web_callbacks calls;
};

/// The running web side: takes the api's snapshots (any thread).
class web_sink {
public:
  virtual ~web_sink() = default;
  virtual void publish(const std::string& snapshot) = 0;
  /// The status server's "http://HOST:PORT", or "" without one.
  virtual std::string url() const = 0;
};

/// Loads the module (beside the program, else ../lib/cq/) and starts what
/// `o` asks for. Throws std::runtime_error saying what failed.
std::unique_ptr<web_sink> start_web(const web_options& o);

/// What is wrong with a --http value ("" when it is HOST:PORT).
std::string listen_problem(const std::string& listen);
/// Whether HOST (of a --http HOST:PORT) is a loopback address.
bool is_loopback_host(const std::string& host);

} // namespace cq::coord
