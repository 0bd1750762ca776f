#pragma once
// Notifications ([[notify]] rules of the coordinator's config, docs/
// operations.md "Watching the fleet"). Each rule has a thread of its own that
// reads the committed event stream from the state database (a read-only
// connection: WAL readers never block the store's commits, so nothing here
// can delay scheduling), delivers each matching event to the rule's webhook
// (libcurl) or command, one at a time, and only then moves the rule's durable
// cursor (<state>/notify.cursors) past it. Delivery is at least once across
// coordinator crashes: an event delivered just before a crash is delivered
// again after it, with the same (job, seq) for the receiver to deduplicate.
// A failing target is retried with backoff (1 s doubling to 60 s), logged and
// counted (cq_notify_failures_total), and holds up only its own rule.
//
// Node kinds (node_down, fault) come from the api's snapshots instead: a
// node's `down` or `fault` turning on. They are not replayed after a
// coordinator restart (the node's state is rebuilt from its heartbeats).

#include "adapters/web.hpp"
#include "config/config.hpp"

#include <memory>
#include <string>
#include <vector>

namespace cq::metrics {
class registry;
}

namespace cq::coord {

struct notifier_options {
  std::string db_path;     ///< the state database (read only)
  std::string cursor_path; ///< the rules' cursors (JSON, replaced atomically)
  std::vector<notify_rule> rules;
  std::shared_ptr<metrics::registry> metrics;
  /// A job's fields from its stored row (web.hpp); throws for a bad record.
  std::function<notify_job(const std::string&, const std::string&, const std::string&, std::int64_t,
                           const std::string&)>
      read_job;
};

class notifier {
public:
  explicit notifier(notifier_options opts); ///< starts a thread per rule
  ~notifier();                              ///< stops them (a delivery in flight ends first)
  notifier(const notifier&) = delete;
  notifier& operator=(const notifier&) = delete;

  /// The api's newest snapshot (any thread): wakes the rules to read new
  /// events, and derives the node kinds from it.
  void publish(const std::string& snapshot);

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

/// The `{kind}`-style fields of a command's arguments expanded from `event`
/// (a JSON object): {kind} {job} {name} {owner} {state} {seq} {node} {text}.
std::string expand_argument(const std::string& arg, const std::string& event_json);

} // namespace cq::coord
