#pragma once
// Finished jobs' history (history.cpp): the time window (ADR 0031) and the
// bound on how many are kept (ADR 0071).
#include "api/state.hpp"

namespace cq::coord::api_impl {

/// Arms one history pass (expire_atom, true) for when the oldest finished
/// job (`ended_ms`, or found by a scan when 0) has passed the history window
/// (config::history_window_ms); nothing when one is armed or none ended.
void schedule_history(api_ptr self, std::int64_t ended_ms);
/// Forgets (in the store, then in memory) the finished jobs past the window.
void expire_history(api_ptr self);
/// Once more than config::history_jobs finished jobs are held (by a 64th of
/// it after an end, `ended`; by any at a start), those beyond it, the oldest
/// to end first, are forgotten in the store and then in memory.
void cap_history(api_ptr self, bool ended);
/// Job `id` ended (its terminal row is in the read model): it joins
/// ended_order, and the bound is checked.
void note_ended(api_ptr self, const std::string& id);

} // namespace cq::coord::api_impl
