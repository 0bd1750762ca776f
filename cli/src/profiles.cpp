// cq profile ls, cq profile rm.

#include "commands.hpp"
#include "cq/cli/escape.hpp"
#include "cq/json.hpp"
#include "cq/units.hpp"
#include "output.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace cq::cli {

namespace {

/// A size as --ram accepts it back: whole MiB below a GiB (13M), else GiB
/// with one decimal (1.5G); "-" for 0 (nothing measured).
std::string gib_text(std::uint64_t bytes) {
  if (bytes == 0)
    return "-";
  constexpr double mib = 1024.0 * 1024.0, gib = 1024.0 * mib;
  if (bytes < (1ull << 30))
    return fmt::format("{:.0f}M", std::max(1.0, static_cast<double>(bytes) / mib));
  return fmt::format("{:.1f}G", static_cast<double>(bytes) / gib);
}

} // namespace

int run_profile_ls(bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call<bus::profile_ls_rep>(bus::profile_ls_req{});
  if (!rep)
    return report_error(rep.error(), json);
  if (json) {
    fmt::print("{}\n", json_text(*rep));
    return 0;
  }
  auto now = sys::wall_ms();
  text_table t;
  t.header = {"KEY", "RUNS", "RAM", "PEAK RAM", "PEAK VRAM", "EST", "UPDATED"};
  t.flex = 0; // a key is a command by default: it gives way (--json has it whole)
  t.rows.reserve(rep->profiles.size());
  for (const auto& p : rep->profiles)
    t.rows.push_back({p.key, std::to_string(p.runs), gib_text(p.ram_bytes),
                      gib_text(p.peak_ram_bytes), gib_text(p.peak_vram_bytes),
                      p.est_ms == 0 ? "-" : format_duration_ms(p.est_ms),
                      age_since(p.updated_ms, now)});
  t.print();
  return 0;
}

int run_profile_rm(const std::string& key, bool json) {
  auto s = open_session();
  if (!s)
    return report_error(s.error(), json);
  auto rep = s->call<bus::profile_ls_rep>(bus::profile_rm_req{key});
  if (!rep)
    return report_error(rep.error(), json);
  if (json) {
    fmt::print("{}\n", json_text(*rep));
    return 0;
  }
  for (const auto& p : rep->profiles)
    fmt::print("forgot profile '{}' ({} run{}); its next job gets the default cap\n",
               escape_control(p.key), p.runs, p.runs == 1 ? "" : "s");
  return 0;
}

} // namespace cq::cli
