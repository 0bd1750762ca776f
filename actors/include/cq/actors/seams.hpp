#pragma once
// Seams: actor handles that production and the simulator (sim/) implement
// differently (CONVENTIONS: one seam for everything nondeterministic).

#include "cq/actors/messages.hpp"

namespace cq::actors {

/// The store: the only actor that touches SQLite (store_actor.cpp). The
/// simulator wraps it to fail chosen commits.
using store_actor = caf::typed_actor<
    /// Commits `batch` in one transaction (grouped with whatever else arrived
    /// meanwhile). The result's error is empty only once the batch is durable;
    /// otherwise nothing of the batch was committed.
    caf::replies_to<commit_atom, std::shared_ptr<const change_batch>>::with<commit_result>,
    /// The same, and `hook` run once the batch is durable (after its reply).
    caf::replies_to<commit_atom, std::shared_ptr<const change_batch>,
                    durable_hook>::with<commit_result>,
    /// Reads the command and environment of `job` (kept only in the store).
    /// Fails when the row is missing or unreadable.
    caf::replies_to<load_atom, std::uint64_t, std::string>::with<job_payload>,
    /// Reads the stored reply of idempotent operation `id` (operation_row's
    /// result, kept only in the store). Fails when there is none (expired).
    caf::replies_to<replay_atom, std::string>::with<std::string>,
    /// Reads committed events (events_req): a page after the query's cursor.
    caf::replies_to<event_atom, events_query>::with<bus::events_rep>,
    /// Reads the audit log (audit_req).
    caf::replies_to<audit_atom, audit_query>::with<bus::audit_rep>,
    /// INTERNAL: commits what arrived since the last flush.
    caf::reacts_to<flush_atom>,
    /// INTERNAL: checks that the database file is still the one opened.
    caf::reacts_to<check_atom>,
    /// From ctx.fatal (`why`): the coordinator is stopping; every later commit
    /// fails, so that nothing decided after the failure becomes durable.
    caf::reacts_to<stop_atom, std::string>>;

/// Carries orders to one node. Production: a frame through the gateway to the
/// connection `peer`. Tests and the simulator: a simulated node, which answers
/// the node actor with (reply_atom, node_reply) as the gateway path would.
using node_link_actor = caf::typed_actor<
    /// INTERNAL: order `id` for the connection `peer`; fire and forget (the
    /// node actor waits for the answer, with its own deadline).
    caf::reacts_to<order_atom, std::uint64_t, std::string, bus::node_order>>;

} // namespace cq::actors
