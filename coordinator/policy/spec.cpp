#include "policy/spec.hpp"
#include "cq/bus/output_pattern.hpp"

#include "policy/placement.hpp"

#include "cq/bus/codec.hpp"
#include "cq/bus/wire_size.hpp"
#include "cq/text.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace cq::policy {

bool valid_name(std::string_view s) {
  return cq::valid_name(s);
}

bool has_nul(std::string_view s) {
  return s.find('\0') != std::string_view::npos;
}

std::optional<bus::error_info> validate_spec(const bus::job_spec& s) {
  using L = bus::limits;
  auto bad = [](std::string field, std::string what) {
    return bus::error_info{errc::invalid_argument, fmt::format("{}: {}", field, what)};
  };
  if (s.argv.empty())
    return bad("argv", "must name a program");
  if (s.argv.size() > L::argv_items)
    return bad("argv", fmt::format("more than {} items", L::argv_items));
  for (std::size_t i = 0; i < s.argv.size(); ++i) {
    if (s.argv[i].size() > L::arg_bytes)
      return bad(fmt::format("argv[{}]", i), "too long");
    if (has_nul(s.argv[i]))
      return bad(fmt::format("argv[{}]", i), "contains a NUL byte");
  }
  if (s.argv[0].empty())
    return bad("argv[0]", "must not be empty");
  if (s.cwd.empty() || s.cwd[0] != '/')
    return bad("cwd", "must be an absolute path");
  if (s.cwd.size() > 4096 || has_nul(s.cwd))
    return bad("cwd", "too long or contains a NUL byte");
  if (s.env.size() > L::argv_items)
    return bad("env", fmt::format("more than {} entries", L::argv_items));
  for (auto& [k, v] : s.env) {
    if (k.empty() || k.find('=') != std::string::npos || has_nul(k) || k.size() > 1024)
      return bad("env", fmt::format("invalid variable name '{}'", k.substr(0, 64)));
    if (v.size() > L::arg_bytes || has_nul(v))
      return bad("env." + k, "too long or contains a NUL byte");
  }
  if (!s.name.empty() && !valid_name(s.name))
    return bad("name", "use 1-64 letters, digits, '.', '-' or '_'");
  if (s.ram_bytes && (*s.ram_bytes < ram_min_bytes || *s.ram_bytes > (1ull << 50)))
    return bad("ram_bytes", "must be between 16 MiB and 1 PiB");
  if (s.node && !valid_name(*s.node))
    return bad("node", "not a valid node name");
  if (s.priority && !policy::parse_level(*s.priority))
    return bad("priority", "must be high, medium or low");
  if (s.gpus && *s.gpus > 64)
    return bad("gpus", "at most 64");
  if (s.vram_bytes && (*s.vram_bytes == 0 || *s.vram_bytes > (1ull << 50)))
    return bad("vram_bytes", "must be between 1 byte and 1 PiB");
  if (s.vram_bytes && s.gpus && *s.gpus == 0)
    return bad("vram_bytes", "a VRAM request needs at least one GPU");
  // 0: the job reserves no CPU (the CLI's default is 1).
  if (s.cpus && *s.cpus > 4096)
    return bad("cpus", "must be between 0 and 4096");
  constexpr std::uint64_t year_ms = 366ull * 24 * 3600 * 1000;
  if (s.est_ms && (*s.est_ms == 0 || *s.est_ms > year_ms))
    return bad("est_ms", "must be between 1 ms and a year");
  if (s.timeout_ms && (*s.timeout_ms == 0 || *s.timeout_ms > year_ms))
    return bad("timeout_ms", "must be between 1 ms and a year");
  if (s.after && s.after->size() > 256)
    return bad("after", "at most 256 dependencies");
  if (s.profile && (s.profile->empty() || s.profile->size() > 256 || has_nul(*s.profile)))
    return bad("profile", "must be 1 to 256 bytes");
  if (s.ram_floor_bytes && *s.ram_floor_bytes > (1ull << 50))
    return bad("ram_floor_bytes", "at most 1 PiB");
  if (s.ram_start_min_bytes && *s.ram_start_min_bytes > (1ull << 50))
    return bad("ram_start_min_bytes", "at most 1 PiB");
  if (s.preempt && *s.preempt != "never" && *s.preempt != "checkpoint")
    return bad("preempt", "must be never or checkpoint");
  constexpr std::uint64_t month_ms = 31ull * 24 * 3600 * 1000;
  if (s.lease_ms && (*s.lease_ms < lease_min_ms || *s.lease_ms > month_ms))
    return bad("lease_ms", "must be between 1 second and 31 days");
  if (s.lost_after_ms && *s.lost_after_ms != 0 &&
      (*s.lost_after_ms < 1000 || *s.lost_after_ms > month_ms))
    return bad("lost_after_ms", "must be between 1 second and 31 days, or 0 (never)");
  if (s.retry_oom && *s.retry_oom > retry_oom_max)
    return bad("retry_oom", fmt::format("at most {}", retry_oom_max));
  if (s.output)
    if (auto why = bus::output_pattern_problem(*s.output); !why.empty())
      return bad("output", why);
  if (s.output && s.pty.value_or(false))
    return bad("output", "a job with a terminal (pty) has its output in its log only");
  // SPEC section 10: a spec small enough that its start order always fits a frame.
  if (auto n = bus::encoded_size(s); n > L::spec_bytes) {
    std::size_t env_bytes = 0, argv_bytes = 0;
    for (auto& [k, v] : s.env)
      env_bytes += k.size() + v.size() + 2;
    for (auto& a : s.argv)
      argv_bytes += a.size() + 1;
    return bus::error_info{errc::too_large,
                           fmt::format("spec: {} bytes encoded, over the limit of {} bytes (argv "
                                       "{} bytes, environment {} bytes)",
                                       n, L::spec_bytes, argv_bytes, env_bytes)};
  }
  return std::nullopt;
}

std::string default_name(const bus::job_spec& s) {
  if (!s.name.empty())
    return s.name;
  auto& p = s.argv[0];
  auto slash = p.rfind('/');
  auto whole = slash == std::string::npos ? p : p.substr(slash + 1);
  // One '_' for each character a name cannot hold (a UTF-8 character is one,
  // however many bytes: ./träin.sh is tr_in.sh, not tr__in.sh).
  std::string base;
  for (std::size_t i = 0; i < whole.size() && base.size() < 64; ++i) {
    auto c = static_cast<unsigned char>(whole[i]);
    if ((c & 0xC0) == 0x80)
      continue; // the rest of a UTF-8 character already given its '_'
    base += is_name_char(whole[i]) ? whole[i] : '_';
  }
  return base.empty() ? std::string("job") : base;
}

namespace {
/// --gpus, else one lane when VRAM is asked for, else none.
std::uint64_t gpus_of(const bus::job_spec& s) {
  return s.gpus.value_or(s.vram_bytes ? 1 : 0);
}
} // namespace

bus::job_info job_of(const bus::job_spec& s) {
  bus::job_info j;
  auto& spec = const_cast<bus::job_spec&>(s); // fields() walks mutable refs; this only reads
  fields(
      [&](std::string_view name, auto& from) {
        using S = std::decay_t<decltype(from)>;
        fields(
            [&](std::string_view to_name, auto& to) {
              using D = std::decay_t<decltype(to)>;
              if (name != to_name)
                return;
              if constexpr (std::is_same_v<S, D>) {
                to = from;
              } else if constexpr (bus::detail::is_optional<S>::value) {
                if constexpr (std::is_same_v<typename S::value_type, D>)
                  if (from)
                    to = *from;
              }
            },
            j);
      },
      spec);
  j.node.clear();
  j.pinned_node = s.node;
  j.name = default_name(s);
  j.gpus = gpus_of(s);
  return j;
}

effective_figures effective(const bus::job_spec& s, const profile_estimate& est,
                            std::uint64_t default_ram_bytes, std::uint64_t default_est_ms) {
  effective_figures e;
  e.ram_bytes = s.ram_bytes ? *s.ram_bytes : est.ram_bytes ? est.ram_bytes : default_ram_bytes;
  e.est_ms = s.est_ms ? *s.est_ms : est.est_ms ? est.est_ms : default_est_ms;
  e.est_default = !s.est_ms && !est.est_ms;
  e.gpus = gpus_of(s);
  return e;
}

std::uint64_t next_oom_cap(std::uint64_t cap, std::uint64_t largest, std::uint64_t floor) {
  auto next = std::max(cap + (cap + 1) / 2, floor);
  if (largest && next > largest)
    next = largest;
  return std::max(next, cap);
}

} // namespace cq::policy
