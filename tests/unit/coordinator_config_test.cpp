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

TEST_CASE("coordinator settings: [retention] history_jobs is a count of jobs, or never") {
  coordinator_settings s;
  CHECK(s.history_jobs == 100'000);
  REQUIRE_FALSE(parse_settings("[retention]\nhistory_jobs = 2500\n", "c.toml", s));
  CHECK(s.history_jobs == 2500);
  REQUIRE_FALSE(parse_settings("[retention]\nhistory_jobs = \"never\"\n", "c.toml", s));
  CHECK(s.history_jobs == 0);
  for (auto text : {"history_jobs = 0", "history_jobs = -3", "history_jobs = \"2500\"",
                    "history_jobs = 1.5", "history_jobs = 2000000000"}) {
    coordinator_settings t;
    auto e = parse_settings(std::string("[retention]\n") + text + "\n", "c.toml", t);
    INFO(text);
    REQUIRE(e);
    CHECK(e->find("c.toml:2: 'retention.history_jobs' must be a number of jobs") == 0);
    CHECK(t.history_jobs == 100'000);
  }
}

TEST_CASE("coordinator settings: [http] and [[notify]] rules") {
  coordinator_settings s;
  auto e = parse_settings(R"([http]
listen = "127.0.0.1:7880"
chart_interval = "30s"
[[notify]]
name = "done"
on = ["succeeded", "failed"]
owners = ["ada"]
names = ["train-*"]
priorities = ["high"]
webhook = "http://127.0.0.1:9/hook"
format = "slack"
[[notify]]
on = ["node_down", "fault"]
per_job = true
command = ["/usr/bin/logger", "{text}"]
)",
                          "c.toml", s);
  REQUIRE_FALSE(e);
  CHECK(s.http_listen == "127.0.0.1:7880");
  CHECK(s.chart_interval_ms == 30'000);
  REQUIRE(s.notify.size() == 2);
  CHECK(s.notify[0].name == "done");
  CHECK(s.notify[0].on == std::vector<std::string>{"succeeded", "failed"});
  CHECK(s.notify[0].names == std::vector<std::string>{"train-*"});
  CHECK(s.notify[0].format == "slack");
  CHECK_FALSE(s.notify[0].per_job);
  CHECK(s.notify[1].name == "notify1"); // unnamed: by its place
  CHECK(s.notify[1].per_job);
  CHECK(s.notify[1].command == std::vector<std::string>{"/usr/bin/logger", "{text}"});
}

TEST_CASE("coordinator settings: bad notify rules are refused naming the rule's field") {
  for (auto [text, says] : {
           std::pair{"[[notify]]\nwebhook = \"http://x/\"\n", "notify[0].on is needed"},
           std::pair{"[[notify]]\non = [\"finished\"]\nwebhook = \"http://x/\"\n",
                     "unknown event kind 'finished'"},
           std::pair{"[[notify]]\non = [\"failed\"]\n", "give exactly one target"},
           std::pair{"[[notify]]\non = [\"failed\"]\nwebhook = \"http://x/\"\ncommand = "
                     "[\"/bin/true\"]\n",
                     "give exactly one target"},
           std::pair{"[[notify]]\non = [\"failed\"]\nwebhook = \"ftp://x/\"\n",
                     "http:// or https://"},
           std::pair{"[[notify]]\non = [\"failed\"]\ncommand = [\"mail\"]\n", "absolute path"},
           std::pair{"[[notify]]\non = [\"failed\"]\nwebhook = \"http://x/\"\nformat = \"xml\"\n",
                     "'xml' is not json, slack or ntfy"},
           std::pair{"[[notify]]\non = [\"failed\"]\nwebhook = \"http://x/\"\nwhen = 1\n",
                     "unknown key 'notify[0].when'"},
           std::pair{"[[notify]]\nname = \"a\"\non = [\"failed\"]\nwebhook = \"http://x/\"\n"
                     "[[notify]]\nname = \"a\"\non = [\"failed\"]\nwebhook = \"http://x/\"\n",
                     "two notify rules are named 'a'"},
           std::pair{"[notify]\non = [\"failed\"]\n", "write each rule as [[notify]]"},
           std::pair{"[http]\nport = 80\n", "unknown key 'http.port'"},
           std::pair{"[http]\nchart_interval = \"100ms\"\n", "between 1s and 1h"},
       }) {
    coordinator_settings s;
    auto e = parse_settings(text, "c.toml", s);
    INFO(text);
    REQUIRE(e);
    CHECK_THAT(*e, Catch::Contains(says));
    CHECK(s.notify.empty());
    CHECK(s.http_listen.empty());
  }
}

TEST_CASE("coordinator settings: worker threads leave the gateway and the store a core each") {
  using cq::coord::worker_threads;
  CHECK(worker_threads(0) == 1); // unknown
  CHECK(worker_threads(1) == 1);
  CHECK(worker_threads(2) == 1);
  CHECK(worker_threads(3) == 1);
  CHECK(worker_threads(4) == 2);
  CHECK(worker_threads(6) == 4);
  CHECK(worker_threads(64) == 4);
}
