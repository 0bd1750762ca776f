#pragma once
// The status server (cq-coordinator --http HOST:PORT, docs/operations.md
// "Watching the fleet"): one read-only HTTP listener on threads of its own,
// never an actor's, serving
//   /            the status page (built into the binary: no external assets)
//   /api/state   the api's latest snapshot (the board's JSON) and its version;
//                ?after=VERSION answers only "unchanged" while it is current
//   /api/charts  the charts' points (a bounded ring sampled every interval)
//   /metrics     Prometheus' text format: the registry's counters and
//                histograms, and gauges derived from the snapshot
//   /login       a form that sets the token cookie (binds off loopback)
// A loopback bind serves without a token; any other bind asks for a token of
// any role (Authorization: Bearer, or the cookie) and answers 401 without one.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace cq::metrics {
class registry;
}

namespace cq::coord {

struct status_options {
  std::string listen;  ///< HOST:PORT (port 0: any free one)
  std::string db_path; ///< the state database, read for token checks
  std::shared_ptr<metrics::registry> metrics;
  std::chrono::milliseconds chart_interval{std::chrono::seconds(10)}; ///< one chart point per
  std::size_t chart_points = 1080; ///< points kept per series (3 hours at 10 s)
  std::function<std::string(const std::string&)> token_hash; ///< a token's stored hash
};

class status_server {
public:
  /// Binds and starts serving; throws std::runtime_error saying why it cannot.
  explicit status_server(status_options opts);
  ~status_server(); ///< stops serving and joins its threads
  status_server(const status_server&) = delete;
  status_server& operator=(const status_server&) = delete;

  /// The api's newest snapshot (any thread): served from now on.
  void publish(const std::string& snapshot);
  /// "http://HOST:PORT" as bound.
  std::string url() const;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace cq::coord
