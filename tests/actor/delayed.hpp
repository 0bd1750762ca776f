#pragma once
// What a deterministic scheduler's clock holds for later: the delayed
// messages, each with the names of the actors it keeps (its receiver and
// its sender). CAF 0.17's clock holds both until the message comes and
// cannot cancel it, so a delayed message keeps an ended actor allocated
// (docs/adr/0070).

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <string>
#include <vector>

namespace cq::test {

struct delayed_message {
  std::string receiver, sender; ///< actor names ("" for none)
  const caf::mailbox_element* content = nullptr;
};

inline std::vector<delayed_message> delayed_messages(caf::scheduler::test_coordinator& sched) {
  using clock_type = caf::detail::simple_actor_clock;
  auto name_of = [](const caf::strong_actor_ptr& a) {
    auto* local = a ? dynamic_cast<caf::local_actor*>(a->get()) : nullptr;
    return std::string(local ? local->name() : "");
  };
  std::vector<delayed_message> out;
  for (auto& [due, event] : sched.clock().schedule()) {
    if (event->subtype != clock_type::actor_msg_type)
      continue;
    auto& m = static_cast<const clock_type::actor_msg&>(*event);
    out.push_back(
        {name_of(m.receiver), m.content ? name_of(m.content->sender) : "", m.content.get()});
  }
  return out;
}

} // namespace cq::test
