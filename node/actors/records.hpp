#pragma once
// The allocation's durable records, alloc.json and exit.json (docs/
// operations.md, "Orders and reports"): one line of JSON each, written by
// walking fields() (cq/json.hpp) with no document built. recovery.cpp and
// retention.cpp read them back by key; the keys are those every earlier
// version wrote, and an absent optional is written as null.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cq::node {

/// alloc.json: written once, durable before the workload starts.
struct alloc_record {
  std::string allocation;
  std::vector<std::string> argv;
  std::uint64_t attempt = 0;
  std::string cgroup; ///< the allocation's cgroup directory ("" = none)
  std::string cwd;
  std::string job;
  std::vector<std::string> lanes;
  std::string mem_mode; ///< memcap_mode's name
  std::optional<std::uint64_t> ram_bytes;
  bool shim = false;           ///< launched under cq-shim
  std::int64_t started_ms = 0; ///< wall clock
  std::optional<std::uint64_t> timeout_ms;
  std::optional<std::uint64_t> vram_bytes;
  /// The leader when it is known before the launch (a standby cq-shim, ADR
  /// 0058): its pid and start time; 0 when not (the `leader` file says).
  std::int64_t pid = 0;
  std::uint64_t start_ticks = 0;
  /// The machine's boot when it was written (process_host::boot_id; ""
  /// when unknown, and in records of earlier versions).
  std::string boot;
};
template <class F>
void fields(F&& f, alloc_record& x) {
  f("allocation", x.allocation), f("argv", x.argv), f("attempt", x.attempt), f("cgroup", x.cgroup),
      f("cwd", x.cwd), f("job", x.job), f("lanes", x.lanes), f("mem_mode", x.mem_mode),
      f("ram_bytes", x.ram_bytes), f("shim", x.shim), f("started_ms", x.started_ms),
      f("timeout_ms", x.timeout_ms), f("vram_bytes", x.vram_bytes), f("pid", x.pid),
      f("start_ticks", x.start_ticks), f("boot", x.boot);
}

/// exit.json: how the allocation ended, durable before its report is queued.
struct exit_record {
  std::string allocation;
  std::uint64_t attempt = 0;
  std::optional<std::string> detail;
  std::optional<std::int64_t> exit_code;
  std::int64_t finished_ms = 0; ///< wall clock (retention dates the directory by it)
  std::string job;
  std::optional<std::uint64_t> peak_ram_bytes;
  std::optional<std::uint64_t> peak_vram_bytes;
  std::string reason;
  std::optional<std::int64_t> signal;
  std::uint64_t wall_ms = 0;
};
template <class F>
void fields(F&& f, exit_record& x) {
  f("allocation", x.allocation), f("attempt", x.attempt), f("detail", x.detail),
      f("exit_code", x.exit_code), f("finished_ms", x.finished_ms), f("job", x.job),
      f("peak_ram_bytes", x.peak_ram_bytes), f("peak_vram_bytes", x.peak_vram_bytes),
      f("reason", x.reason), f("signal", x.signal), f("wall_ms", x.wall_ms);
}

} // namespace cq::node
