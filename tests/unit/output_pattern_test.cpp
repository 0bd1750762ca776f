// cq submit --output PATTERN (bus/output_pattern.hpp): what is refused, and
// how each placeholder expands.
#include "cq/bus/output_pattern.hpp"

#include <catch2/catch.hpp>

using cq::bus::expand_output;
using cq::bus::output_pattern_problem;

TEST_CASE("an output pattern is an absolute file path with known placeholders") {
  CHECK(output_pattern_problem("/home/ann/logs/%x-%j.out").empty());
  CHECK(output_pattern_problem("/tmp/%j_%a_%n_100%%.txt").empty());
  CHECK(output_pattern_problem("/tmp/plain.log").empty());
  CHECK(output_pattern_problem("") == "is empty");
  CHECK(output_pattern_problem("logs/x.out") == "is not an absolute path");
  CHECK(output_pattern_problem("/tmp/%q.out").starts_with("has %q: the placeholders are"));
  CHECK(output_pattern_problem("/tmp/%A_%a.out").starts_with("has %A"));
  CHECK(output_pattern_problem("/tmp/x%").starts_with("ends with a lone %"));
  CHECK(output_pattern_problem("/tmp/logs/").starts_with("names a directory"));
  CHECK(output_pattern_problem(std::string("/tmp/a\nb")).starts_with("holds a NUL byte"));
  CHECK(output_pattern_problem(std::string("/tmp/a\0b", 8)).starts_with("holds a NUL byte"));
  CHECK(output_pattern_problem("/" + std::string(1024, 'a')).starts_with("is longer than 1024"));
}

TEST_CASE("placeholders expand; a value cannot add a directory") {
  cq::bus::output_values v{"0f3c9a2e-job", "7", "sweep-7", "gpu-box"};
  CHECK(expand_output("/l/%x-%j.out", v) == "/l/sweep-7-0f3c9a2e-job.out");
  CHECK(expand_output("/l/%a/%n/100%%", v) == "/l/7/gpu-box/100%");
  CHECK(expand_output("/l/plain", v) == "/l/plain");
  v.array_index = "";
  CHECK(expand_output("/l/%x_%a.out", v) == "/l/sweep-7_.out");
  v.name = "a/../b";
  CHECK(expand_output("/l/%x.out", v) == "/l/a_.._b.out");
}
