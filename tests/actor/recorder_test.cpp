// The node's exit recorder (node/actors/recorder.cpp) on CAF's deterministic
// scheduler, over cq-sim's disk: records asked for together are written as
// one group (ADR 0053), each answered only once it is durable; one asked for
// alone is written at once.
#include "node/actors/node_actors.hpp"
#include "sim/disk.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace cq;

TEST_CASE("exit records asked for together are written as one group, and each is answered once "
          "durable") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys(cfg);
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  sim::sim_disk disk;
  for (int i = 0; i < 6; ++i)
    REQUIRE(disk.make_dirs("/s/allocations/a" + std::to_string(i)));
  auto recorder = node::spawn_recorder(sys, &disk);
  std::vector<std::string> answered; // files, in the order answered
  std::vector<std::string> not_durable;
  auto ask = [&](int from, int to) {
    sys.spawn([&, from, to](caf::event_based_actor* self) {
      // Every request is in the recorder's mailbox before it runs.
      for (int i = from; i < to; ++i) {
        auto file = "/s/allocations/a" + std::to_string(i) + "/exit.json";
        self->request(recorder, caf::infinite, node::record_atom::value, file,
                      "{\"i\":" + std::to_string(i) + "}\n")
            .then([&, file](bool ok) {
              CHECK(ok);
              answered.push_back(file);
              // Durable when answered: it survives a power loss.
              sim::sim_disk copy = disk;
              copy.power_loss();
              if (!copy.exists(file))
                not_durable.push_back(file);
            });
      }
    });
    sched.run();
  };
  ask(0, 5);
  CHECK(answered.size() == 5);
  CHECK(not_durable.empty());
  CHECK(disk.groups == 1);
  CHECK(disk.largest_group == 5);
  // Alone: written at once, a group of one.
  ask(5, 6);
  CHECK(answered.size() == 6);
  CHECK(not_durable.empty());
  CHECK(disk.groups == 2);
  CHECK(disk.largest_group == 5);
  CHECK(disk.read("/s/allocations/a3/exit.json", 100) == std::string("{\"i\":3}\n"));
  caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
  sched.run();
}
