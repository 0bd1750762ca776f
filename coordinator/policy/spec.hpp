#pragma once
// A submitted spec: its checks and the job's effective figures (SPEC
// sections 2 and 10). Pure functions: no CAF, no store, no clock.

#include "policy/profile.hpp"

#include "cq/bus/protocol.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace cq::policy {

/// A job, node or identity name: [A-Za-z0-9._-]{1,64} (ASCII only).
bool valid_name(std::string_view s);

bool has_nul(std::string_view s);

/// The shortest lease a job may ask for, and the most OOM retries.
inline constexpr std::uint64_t lease_min_ms = 1000;
inline constexpr std::uint64_t retry_oom_max = 10;
/// OOM retries of a job whose cap cq chose (no --ram): enough for the ladder
/// from the default 1 GiB past 38 GiB; then the OOM is final.
inline constexpr std::uint64_t auto_oom_retries = 10;
/// The smallest RAM cap a job may have (a smaller one kills `true`).
inline constexpr std::uint64_t ram_min_bytes = 16ull << 20;

/// The next rung of the OOM retry ladder (HTCondor's retry_request_memory):
/// the cap times 1.5, rounded up, and at least `floor` (the default cap, for
/// a cap cq chose), but never above `largest` (the largest node's
/// allocatable RAM; 0 = unknown) nor below the cap itself. Equal to `cap`
/// when no node has more to give.
std::uint64_t next_oom_cap(std::uint64_t cap, std::uint64_t largest, std::uint64_t floor = 0);

/// Checks a submitted spec against the protocol's limits. nullopt = valid;
/// otherwise the error names the field (invalid_argument), or says by how
/// much the encoded spec is over its limit (too_large).
std::optional<bus::error_info> validate_spec(const bus::job_spec& s);

/// The job's name: as given, else the last path component of argv[0] with
/// every character a name may not hold replaced by '_' (a name is always
/// [A-Za-z0-9._-]{1,64}, whatever bytes the command has).
/// REQUIRES: validate_spec(s) passed.
std::string default_name(const bus::job_spec& s);

/// The job a spec asks for, before what the coordinator adds (its id, owner,
/// state, times and effective figures): each job_info field that a job_spec
/// field of the same name and type (or its optional) matches takes the spec's
/// value where the spec sets it, so a field added to both structs flows from
/// submit to the stored job without code here. The one name the two use
/// differently: the spec's `node` is the pinned node (job_info's
/// `pinned_node`); job_info's `node` is its allocation's and stays empty.
/// The name is default_name(s); `gpus` is effective().gpus.
/// REQUIRES: validate_spec(s) passed.
bus::job_info job_of(const bus::job_spec& s);

/// What the scheduler plans with and the node enforces.
struct effective_figures {
  std::uint64_t ram_bytes = 0; ///< --ram, else the profile's, else the default: the hard cap
  std::uint64_t est_ms = 0;    ///< --est, else the profile's, else the default
  bool est_default = false;    ///< est_ms is the default (neither --est nor a measurement)
  std::uint64_t gpus = 0;      ///< --gpus, else 1 when VRAM is asked for, else 0
};

/// The effective figures of `s`, fixed at submit: later profile updates do
/// not change a job already queued.
effective_figures effective(const bus::job_spec& s, const profile_estimate& est,
                            std::uint64_t default_ram_bytes, std::uint64_t default_est_ms);

} // namespace cq::policy
