// The coordinator's Prometheus registry (ground/include/cq/metrics.hpp): the
// text exposition format it writes (promtool checks it in
// tests/integration/test_metrics.sh).
#include "cq/metrics.hpp"

#include <catch2/catch.hpp>

using cq::metrics::registry;

TEST_CASE("metrics: declared families are written at zero, counters add up by label") {
  registry r;
  r.counter("cq_x_total", "Things.");
  r.histogram("cq_wait_seconds", "Waits.", {1, 10});
  auto empty = r.render();
  CHECK_THAT(empty, Catch::Contains("# TYPE cq_x_total counter\ncq_x_total 0\n"));
  CHECK_THAT(empty, Catch::Contains("cq_wait_seconds_bucket{le=\"+Inf\"} 0\n"));
  r.add("cq_x_total", {{"outcome", "oom"}});
  r.add("cq_x_total", {{"outcome", "oom"}}, 2);
  r.add("cq_unknown_total"); // never declared: ignored
  CHECK(r.value("cq_x_total", {{"outcome", "oom"}}) == 3);
  CHECK_THAT(r.render(), Catch::Contains("cq_x_total{outcome=\"oom\"} 3\n"));
  CHECK_THAT(r.render(), !Catch::Contains("cq_unknown_total"));
}

TEST_CASE("metrics: histogram buckets are cumulative, with the sum and the count") {
  registry r;
  r.histogram("cq_wait_seconds", "Waits.", {1, 10});
  r.observe("cq_wait_seconds", 0.5);
  r.observe("cq_wait_seconds", 5);
  r.observe("cq_wait_seconds", 50);
  auto text = r.render();
  CHECK_THAT(text, Catch::Contains("cq_wait_seconds_bucket{le=\"1\"} 1\n"
                                   "cq_wait_seconds_bucket{le=\"10\"} 2\n"
                                   "cq_wait_seconds_bucket{le=\"+Inf\"} 3\n"
                                   "cq_wait_seconds_sum 55.5\n"
                                   "cq_wait_seconds_count 3\n"));
}

TEST_CASE("metrics: label values are escaped") {
  registry r;
  r.counter("cq_x_total", "Things.");
  r.add("cq_x_total", {{"rule", "a\"b\\c\nd"}});
  CHECK_THAT(r.render(), Catch::Contains(R"(cq_x_total{rule="a\"b\\c\nd"} 1)"));
}
