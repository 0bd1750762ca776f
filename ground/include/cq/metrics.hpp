#pragma once
// The coordinator's counters and histograms for Prometheus (`/metrics`,
// docs/operations.md "Watching the fleet"). The actors count into one
// registry (a mutex each call: a few calls per job, never a wait on I/O); the
// HTTP thread renders it in the text exposition format. Gauges that describe
// the fleet now (jobs by state, nodes, memory) are not kept here: the status
// server derives them from the api's latest snapshot.
//
// Names follow Prometheus' conventions: the `cq_` prefix, base units
// (seconds, bytes), `_total` on counters. Label values are escaped.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace cq::metrics {

/// Label pairs, in the order they are written.
using labels = std::vector<std::pair<std::string, std::string>>;

class registry {
public:
  /// Declares a counter or a histogram (its help text, and a histogram's
  /// bucket bounds in its base unit, ascending). Declared families are
  /// written even before their first sample, so a scrape shows them at 0.
  void counter(const std::string& name, std::string help);
  void histogram(const std::string& name, std::string help, std::vector<double> bounds);

  /// Adds `by` to counter `name` with `l` (declared first).
  void add(const std::string& name, const labels& l = {}, double by = 1);
  /// Records one observation of histogram `name`.
  void observe(const std::string& name, double value, const labels& l = {});
  /// The current value of counter `name` with `l` (0 when never counted).
  double value(const std::string& name, const labels& l = {}) const;

  /// Every family in the text exposition format (version 0.0.4).
  std::string render() const;

private:
  struct histo {
    std::vector<std::uint64_t> counts; ///< per bucket, not cumulative
    double sum = 0;
    std::uint64_t count = 0;
  };
  struct family {
    std::string help;
    bool is_histogram = false;
    std::vector<double> bounds;
    std::map<labels, double> counters;
    std::map<labels, histo> histograms;
  };
  mutable std::mutex m_;
  std::map<std::string, family> families_;
};

/// A label value escaped for the exposition format (backslash, quote, newline).
std::string escape_label(const std::string& v);
/// `{a="x",b="y"}`, or "" for no labels.
std::string format_labels(const labels& l);
/// A sample value as the format writes it (integers without a fraction).
std::string format_value(double v);

} // namespace cq::metrics
