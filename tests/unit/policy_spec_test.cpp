// Spec checks and effective figures (coordinator/policy/spec.hpp).
#include "policy/spec.hpp"

#include <catch2/catch.hpp>

using namespace cq;
using namespace cq::policy;

namespace {
bus::job_spec good() {
  bus::job_spec s;
  s.argv = {"python", "train.py"};
  s.cwd = "/work";
  return s;
}
std::string field_of(const std::optional<bus::error_info>& e) {
  REQUIRE(e);
  return e->message.substr(0, e->message.find(':'));
}
} // namespace

TEST_CASE("a valid spec passes and every bad field is named") {
  CHECK_FALSE(validate_spec(good()));
  auto s = good();
  s.argv.clear();
  CHECK(field_of(validate_spec(s)) == "argv");
  s = good();
  s.cwd = "relative";
  CHECK(field_of(validate_spec(s)) == "cwd");
  s = good();
  s.argv[1] = std::string("a\0b", 3);
  CHECK(field_of(validate_spec(s)) == "argv[1]");
  s = good();
  s.env["A=B"] = "x";
  CHECK(field_of(validate_spec(s)) == "env");
  s = good();
  s.ram_bytes = 0;
  CHECK(field_of(validate_spec(s)) == "ram_bytes");
  s.ram_bytes = (16ull << 20) - 1; // below the smallest cap
  CHECK(field_of(validate_spec(s)) == "ram_bytes");
  s.ram_bytes = 16ull << 20;
  CHECK(!validate_spec(s));
  s = good();
  s.priority = "urgent";
  CHECK(field_of(validate_spec(s)) == "priority");
  s = good();
  s.gpus = 0;
  s.vram_bytes = 1 << 30;
  CHECK(field_of(validate_spec(s)) == "vram_bytes");
  s = good();
  s.preempt = "always";
  CHECK(field_of(validate_spec(s)) == "preempt");
  s = good();
  s.name = "has space";
  CHECK(field_of(validate_spec(s)) == "name");
}

TEST_CASE("a spec over the size limit is too_large and says how big it is") {
  auto s = good();
  for (int i = 0; i < 40; ++i)
    s.env["VAR" + std::to_string(i)] = std::string(30'000, 'x');
  auto e = validate_spec(s);
  REQUIRE(e);
  CHECK(e->code == errc::too_large);
  CHECK(e->message.find("environment") != std::string::npos);
}

TEST_CASE("a default name is argv[0]'s last component made safe") {
  auto s = good();
  s.argv[0] = "/usr/bin/my tool!";
  CHECK(default_name(s) == "my_tool_");
  CHECK(valid_name(default_name(s)));
  s.name = "given";
  CHECK(default_name(s) == "given");
  // A character a name cannot hold is one '_', however many bytes it takes.
  s.name.clear();
  s.argv[0] = "./tr\xc3\xa4in.sh"; // träin.sh
  CHECK(default_name(s) == "tr_in.sh");
  s.argv[0] = "\xe2\x9c\x93-ok"; // a check mark
  CHECK(default_name(s) == "_-ok");
  s.argv[0] = std::string(70, 'a');
  CHECK(default_name(s).size() == 64);
}

TEST_CASE("effective figures: the spec's, else the profile's, else the defaults") {
  auto s = good();
  profile_estimate none;
  auto e = effective(s, none, 1ull << 30, 3600'000);
  CHECK(e.ram_bytes == 1ull << 30);
  CHECK(e.est_ms == 3600'000);
  CHECK(e.gpus == 0);
  profile_estimate p{3ull << 30, 60'000};
  e = effective(s, p, 1ull << 30, 3600'000);
  CHECK(e.ram_bytes == 3ull << 30);
  CHECK(e.est_ms == 60'000);
  s.ram_bytes = 5ull << 30;
  s.est_ms = 1000;
  s.vram_bytes = 8ull << 30;
  e = effective(s, p, 1ull << 30, 3600'000);
  CHECK(e.ram_bytes == 5ull << 30);
  CHECK(e.est_ms == 1000);
  CHECK(e.gpus == 1); // VRAM asks for a GPU
}

TEST_CASE("a spec's fields reach its job by name, the pinned node included") {
  bus::job_spec s;
  s.argv = {"/opt/bin/train", "--lr", "0.1"}, s.cwd = "/w", s.env = {{"A", "1"}};
  s.ram_bytes = 1ull << 30, s.node = "box", s.priority = "high", s.vram_bytes = 8ull << 30;
  s.cpus = 4, s.est_ms = 60000, s.timeout_ms = 90000, s.after = bus::string_list{"a"};
  s.profile = "p", s.ram_floor_bytes = 5, s.ram_start_min_bytes = 6, s.preempt = "checkpoint";
  s.lease_ms = 7000, s.lost_after_ms = 0, s.no_requeue = true, s.retry_oom = 2;
  s.output = "/o/%j", s.pty = false;
  auto j = policy::job_of(s);
  CHECK(j.name == "train"); // default_name
  CHECK(j.argv == s.argv);
  CHECK(j.cwd == "/w");
  CHECK(j.ram_bytes == s.ram_bytes);
  CHECK(j.pinned_node == "box");
  CHECK(j.node.empty()); // job_info's node is its allocation's
  CHECK(j.priority == "high");
  CHECK(j.gpus == 1); // VRAM asked for: one lane
  CHECK(j.vram_bytes == s.vram_bytes);
  CHECK((j.cpus == 4 && j.est_ms == 60000u && j.timeout_ms == 90000u));
  CHECK(j.after == bus::string_list{"a"});
  CHECK((j.profile == "p" && j.ram_floor_bytes == 5 && j.ram_start_min_bytes == 6));
  CHECK((j.preempt == "checkpoint" && j.lease_ms == 7000 && j.lost_after_ms == 0));
  CHECK((j.no_requeue && j.retry_oom == 2 && j.output == "/o/%j" && !j.pty));
  // What a spec leaves unset keeps the job's defaults.
  bus::job_spec bare;
  bare.argv = {"true"}, bare.cwd = "/";
  auto d = policy::job_of(bare);
  CHECK((d.priority == "medium" && d.preempt == "never" && d.gpus == 0 && !d.pinned_node));
  CHECK((d.name == "true" && d.after.empty() && d.output.empty()));
}
