#pragma once
// The job and allocation state machines (SPEC section 4). One function per
// machine writes the state field, after checking the edge against the
// machine's table (systemd's service_set_state() is the model); nothing else
// assigns it. An edge the table lacks is a bug: the process stops, in
// release builds too (CONVENTIONS.md: bugs are assertions).

#include "cq/bus/schema.hpp"
#include "cq/records.hpp"

#include <functional>
#include <string>
#include <string_view>

namespace cq::policy {

/// Whether the job machine has the edge `from` -> `to` (a state to itself is
/// no change and always allowed; a terminal state has no edge out).
bool job_edge(bus::job_state from, bus::job_state to);
/// Whether the allocation machine has the edge `from` -> `to` (the same).
bool alloc_edge(bus::alloc_state from, bus::alloc_state to);

/// Whether the node machine has the edge `from` -> `to`: a joined node is
/// pending until approved; joining again (a replaced identity) makes it
/// pending again.
bool node_edge(std::string_view from, std::string_view to);

/// The only writer of a node row's state: checks the edge, tells the observer.
void set_state(node_row& node, std::string_view to);
/// The only writer of a job's state: checks the edge, tells the observer.
void set_state(bus::job_info& job, bus::job_state to);
/// The only writer of an allocation's state: checks the edge, tells the observer.
void set_state(bus::allocation_info& alloc, bus::alloc_state to);

/// Sees every transition as it is made (before its commit): the machine
/// ("job" or "allocation"), the id, and the states by their wire names.
/// cq-sim's checkers install one; production has none.
using transition_observer = std::function<void(std::string_view machine, const std::string& id,
                                               std::string_view from, std::string_view to)>;
/// Installs `o` (empty: none) for the whole process; returns the previous one.
transition_observer observe_transitions(transition_observer o);

} // namespace cq::policy
