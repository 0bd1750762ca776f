// The coordinator's TOML settings (coordinator/config/config.hpp).
#include "config/config.hpp"

#include <catch2/catch.hpp>

using cq::coord::coordinator_settings;
using cq::coord::parse_settings;

TEST_CASE("coordinator settings: durations, never, and the defaults kept") {
  coordinator_settings s;
  auto e = parse_settings("[notify_blocked_after]\nyield = \"10m\"\n[nodes]\nlost_after = "
                          "\"never\"\ntimeout = \"45s\"\n",
                          "c.toml", s);
  REQUIRE_FALSE(e);
  CHECK(s.blocked_after_yield_ms == 600'000);
  CHECK(s.blocked_after_other_ms == 30 * 60'000);
  CHECK(s.lost_after_ms == 0);
  CHECK(s.node_timeout_ms == 45'000);
  CHECK(s.lease_ms == 30 * 60'000);
  CHECK(s.operation_window_ms == 24 * 3600'000);
  REQUIRE_FALSE(parse_settings("[retention]\noperations = \"2h\"\n", "c.toml", s));
  CHECK(s.operation_window_ms == 2 * 3600'000);
}

TEST_CASE("coordinator settings: bad values are refused naming the field, and change nothing") {
  for (auto [text, field] : {std::pair{"[notify_blocked_after]\nyield = \"0s\"\n", "yield"},
                             std::pair{"[notify_blocked_after]\nother = \"-5m\"\n", "other"},
                             std::pair{"[notify_blocked_after]\nother = 30\n", "other"},
                             std::pair{"[scheduler]\nlease = \"never\"\n", "lease"},
                             std::pair{"[scheduler]\nleese = \"1m\"\n", "leese"},
                             std::pair{"[sched]\nlease = \"1m\"\n", "sched"},
                             std::pair{"[nodes]\ntimeout = \"soon\"\n", "timeout"}}) {
    coordinator_settings s;
    s.lease_ms = 1234;
    // A valid value beside the bad one is not applied either.
    std::string t = text;
    auto valid = t.rfind("[scheduler]", 0) == 0 ? "[nodes]\ntimeout = \"1m\"\n"
                                                : "[scheduler]\nlease = \"5m\"\n";
    auto e = parse_settings(valid + t, "c.toml", s);
    INFO(text);
    REQUIRE(e);
    CHECK(e->find(field) != std::string::npos);
    CHECK(e->find("c.toml:") == 0);
    CHECK(s.lease_ms == 1234);
    CHECK(s.node_timeout_ms == 30'000);
  }
}
