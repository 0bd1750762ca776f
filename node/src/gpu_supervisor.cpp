// gpu_supervisor (gpu.hpp): the GPU side's logic (lanes, VRAM attribution and
// caps, the fault latch, the GPU lock's references) over the GPU probes of
// seams.hpp, which node/adapters/gpu.cpp implements with nvidia-smi, /proc,
// the kernel log and flock, and cq-sim over a simulated machine.
#include "cq/node/gpu.hpp"
#include "cq/node/seams.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>

namespace cq::node {

namespace {

constexpr std::int64_t detect_retry_ms = 60'000;
constexpr std::int64_t klog_retry_ms = 60'000;
constexpr std::uint64_t mib = 1024 * 1024;

} // namespace

gpu_supervisor::gpu_supervisor(gpu_config cfg, std::filesystem::path state_dir,
                               std::unique_ptr<gpu_probes> probes, node_disk& disk)
    : cfg_(std::move(cfg)), state_dir_(std::move(state_dir)), probes_(std::move(probes)),
      latch_(disk, state_dir_), wall_([] { return std::int64_t{0}; }) {}

void gpu_supervisor::log_once(std::string& last, const std::string& message) {
  if (message != last)
    spdlog::warn("{}", message);
  last = message;
}

void gpu_supervisor::start(std::int64_t now_ms) {
  if (auto st = latch_.load(wall_()); !st)
    spdlog::error("kernel fault record: {}", st.error().message);
  if (auto& f = latch_.current())
    spdlog::error("KERNEL GPU FAULT LATCHED (Xid {} on {}, {}): GPU jobs are refused until the "
                  "Owner clears it (cq node clear-fault NAME --reason TEXT)",
                  f->xid, f->device, f->message);
  next_klog_open_ms_ = now_ms;
  detect(now_ms);
}

void gpu_supervisor::detect(std::int64_t now_ms) {
  if (!cfg_.lanes.empty()) {
    // Registered lanes replace detection (gpu.hpp): nvidia-smi is not asked.
    lanes_ = cfg_.lanes;
    lanes_detected_ = true;
    std::vector<std::string> names;
    for (auto& l : lanes_)
      names.push_back(fmt::format("{} (index {}, uuid {}, {} MiB)", l.name,
                                  l.index ? std::to_string(*l.index) : "none",
                                  l.uuid.empty() ? "none" : l.uuid, l.vram_total_bytes / mib));
    spdlog::info("GPU lanes registered in node.toml: {}", fmt::join(names, ", "));
    next_sample_ms_ = now_ms;
    return;
  }
  if (!cfg_.telemetry) {
    // nvidia-smi is never run (gpu.hpp): without registered lanes, no lanes.
    lanes_.clear();
    lanes_detected_ = true;
    next_sample_ms_ = now_ms;
    return;
  }
  auto lanes = probes_->detect_lanes();
  if (!lanes) {
    log_once(last_detect_error_, fmt::format("no GPU lanes for now: {}; retrying every {} s",
                                             lanes.error().message, detect_retry_ms / 1000));
    next_detect_ms_ = now_ms + detect_retry_ms;
    return;
  }
  lanes_ = std::move(*lanes);
  lanes_detected_ = true;
  last_detect_error_.clear();
  std::vector<std::string> names;
  for (auto& l : lanes_)
    names.push_back(fmt::format("{} ({}, {} MiB)", l.name, l.uuid, l.vram_total_bytes / mib));
  spdlog::info("GPU lanes: {}", fmt::join(names, ", "));
  next_sample_ms_ = now_ms;
}

std::vector<gpu_supervisor::stop_request> gpu_supervisor::tick(std::int64_t now_ms,
                                                               std::int64_t sample_every_ms) {
  std::vector<stop_request> stops;
  follow_kernel_log(now_ms, stops);
  if (!lanes_detected_ && now_ms >= next_detect_ms_)
    detect(now_ms);
  if (lanes_detected_ && now_ms >= next_sample_ms_) {
    sample(stops, std::max<std::int64_t>(sample_every_ms, 100));
    next_sample_ms_ = now_ms + std::max<std::int64_t>(sample_every_ms, 100);
  }
  // While latched, every GPU allocation of this node stops (also one adopted
  // after a restart, or one that started in the instant before the latch).
  if (latch_.latched())
    for (auto& [id, a] : allocs_)
      if (a.pgid > 0 && a.stop_reason.empty() && !a.stopped_elsewhere) {
        a.stop_reason = "fault";
        stops.push_back({id, "fault",
                         fmt::format("kernel GPU fault latched (Xid {} on {})",
                                     latch_.current()->xid, latch_.current()->device)});
      }
  return stops;
}

std::int64_t gpu_supervisor::next_deadline() const {
  std::int64_t next = INT64_MAX;
  if (!lanes_detected_)
    next = std::min(next, next_detect_ms_);
  else
    next = std::min(next, next_sample_ms_);
  if (!cfg_.kernel_log.empty() && !klog_open_)
    next = std::min(next, next_klog_open_ms_);
  return next;
}

void gpu_supervisor::follow_kernel_log(std::int64_t now_ms, std::vector<stop_request>& stops) {
  (void)stops; // the stops of a new latch are made by tick() for every GPU allocation
  if (cfg_.kernel_log.empty())
    return;
  if (!klog_open_) {
    if (now_ms < next_klog_open_ms_)
      return;
    if (auto st = probes_->open_kernel_log(); !st) {
      log_once(last_klog_error_, fmt::format("GPU fault latch: kernel log not followed: {}; "
                                             "retrying every {} s",
                                             st.error().message, klog_retry_ms / 1000));
      next_klog_open_ms_ = now_ms + klog_retry_ms;
      return;
    }
    klog_open_ = true;
    if (!last_klog_error_.empty())
      spdlog::info("GPU fault latch: following {}", cfg_.kernel_log);
    last_klog_error_.clear();
    spdlog::debug("GPU fault latch: following {}", cfg_.kernel_log);
  }
  for (auto& line : probes_->kernel_log_lines()) {
    auto e = parse_xid_line(line);
    if (!e)
      continue;
    auto cls = classify_xid(e->xid);
    if (cls != xid_class::hardware) {
      spdlog::warn("kernel: NVIDIA Xid {} on {} ({} class, not a GPU fault): {}", e->xid, e->device,
                   to_string(cls), e->line);
      continue;
    }
    std::optional<std::string> write_error;
    if (latch_.latch(*e, wall_(), &write_error)) {
      spdlog::error("KERNEL GPU FAULT: Xid {} on {} ({}); latched in {}; stopping this node's GPU "
                    "jobs and refusing new ones until the Owner clears it",
                    e->xid, e->device, e->line, latch_.file().string());
      if (write_error)
        spdlog::error("the fault could not be written ({}); it holds until this daemon stops",
                      *write_error);
    } else {
      spdlog::warn("kernel: another GPU fault while latched (Xid {} on {}): {}", e->xid, e->device,
                   e->line);
    }
  }
}

gpu_supervisor::~gpu_supervisor() = default;

void gpu_supervisor::sample(std::vector<stop_request>& stops, std::int64_t sample_every_ms) {
  busy_probes_ = probes_->busy_probes();
  if (!cfg_.telemetry)
    return; // registered lanes report 0 VRAM used; no cap can be enforced
  auto got = probes_->telemetry(sample_every_ms);
  if (!got)
    return; // no new telemetry since the last tick
  auto& gpus = got->first;
  auto& apps = got->second;
  const bool registered = !cfg_.lanes.empty();
  if (!gpus || !apps) {
    log_once(last_sample_error_,
             fmt::format("GPU telemetry unavailable: {}{}",
                         (!gpus ? gpus.error() : apps.error()).message,
                         registered ? " (registered lanes report 0 VRAM used)" : ""));
    if (registered) {
      // No answer is no knowledge: a registered lane reports 0, never a stale figure.
      for (auto& l : lanes_)
        l.vram_used_bytes = l.vram_outside_bytes = 0;
      outside_.clear();
    }
    return;
  }
  if (!last_sample_error_.empty())
    spdlog::info("GPU telemetry is back");
  last_sample_error_.clear();
  auto devices = parse_gpu_query(*gpus);
  for (auto& l : lanes_) {
    auto d = std::find_if(devices.begin(), devices.end(),
                          [&](const gpu_device& dev) { return dev.uuid == l.uuid; });
    if (d != devices.end())
      l.vram_used_bytes = d->used_bytes;
    else if (registered)
      l.vram_used_bytes = 0; // no uuid, or a device nvidia-smi does not list
  }
  std::vector<gpu_owner> owners;
  for (auto& [id, a] : allocs_)
    if (a.pgid > 0)
      owners.push_back({id, a.pgid});
  auto s = attribute_apps(parse_apps_query(*apps), lanes_,
                          [&](pid_t pid) { return probes_->owner_of(pid, owners); });
  for (auto& p : s.outside)
    if (auto comm = probes_->process_name(static_cast<pid_t>(p.pid)))
      p.name = std::string(trim(*comm));
  outside_ = std::move(s.outside);
  for (auto& l : lanes_) {
    auto it = s.outside_per_lane.find(l.name);
    l.vram_outside_bytes = it == s.outside_per_lane.end() ? 0 : it->second;
  }
  for (auto& [id, a] : allocs_) {
    auto it = s.by_allocation.find(id);
    if (it == s.by_allocation.end()) {
      a.vram_now = 0;
      continue;
    }
    auto& use = it->second;
    a.vram_now = use.total();
    a.peak_lane = std::max(a.peak_lane, use.max_lane());
    if (a.vram_cap && a.stop_reason.empty() && !a.stopped_elsewhere)
      if (auto over = over_vram_cap(use, *a.vram_cap)) {
        a.stop_reason = "vram_cap";
        stops.push_back({id, "vram_cap",
                         fmt::format("uses {} MiB of VRAM on {}, over its cap of {} MiB",
                                     over->second / mib, over->first, *a.vram_cap / mib)});
      }
  }
}

status gpu_supervisor::before_launch(const std::string& allocation, const bus::string_list& lanes,
                                     std::optional<std::uint64_t> vram_cap,
                                     std::chrono::milliseconds lock_wait) {
  if (auto& f = latch_.current())
    return bus::error_info{errc::unavailable,
                           fmt::format("a kernel GPU fault is latched on this node (Xid {} on "
                                       "{}); GPU jobs are refused until the Owner clears it",
                                       f->xid, f->device)};
  busy_probes_ = probes_->busy_probes();
  if (!busy_probes_.empty())
    return bus::error_info{errc::unavailable,
                           fmt::format("GPU lock probe {} is held by a process outside cq; GPU "
                                       "jobs wait until it is free",
                                       fmt::join(busy_probes_, ", "))};
  if (allocs_.count(allocation) == 0) {
    if (auto st = probes_->lock_acquire(lock_wait); !st)
      return st.error();
    allocs_[allocation] = gpu_alloc{0, lanes, vram_cap};
  }
  return done{};
}

void gpu_supervisor::launched(const std::string& allocation, pid_t pgid) {
  if (auto it = allocs_.find(allocation); it != allocs_.end())
    it->second.pgid = pgid;
}

void gpu_supervisor::adopt(const std::string& allocation, pid_t pgid, const bus::string_list& lanes,
                           std::optional<std::uint64_t> vram_cap) {
  if (allocs_.count(allocation))
    return;
  if (auto st = probes_->lock_acquire(std::chrono::milliseconds(0)); !st)
    spdlog::warn("allocation {}: re-adopted without the GPU lock: {}", allocation,
                 st.error().message);
  allocs_[allocation] = gpu_alloc{pgid, lanes, vram_cap};
}

std::optional<gpu_supervisor::finished_info> gpu_supervisor::finish(const std::string& allocation) {
  auto it = allocs_.find(allocation);
  if (it == allocs_.end())
    return std::nullopt;
  finished_info info;
  if (it->second.peak_lane > 0)
    info.peak_vram_bytes = it->second.peak_lane;
  if (!it->second.stopped_elsewhere)
    info.stop_reason = it->second.stop_reason;
  allocs_.erase(it);
  probes_->lock_release();
  return info;
}

std::string gpu_supervisor::stop_reason(const std::string& allocation) const {
  auto it = allocs_.find(allocation);
  if (it == allocs_.end() || it->second.stopped_elsewhere)
    return "";
  return it->second.stop_reason;
}

void gpu_supervisor::stopped_elsewhere(const std::string& allocation) {
  if (auto it = allocs_.find(allocation); it != allocs_.end() && it->second.stop_reason.empty())
    it->second.stopped_elsewhere = true;
}

void gpu_supervisor::fill_heartbeat(bus::heartbeat_req& hb) const {
  if (!lanes_.empty())
    hb.lanes = lanes_;
  if (latch_.current())
    hb.fault = *latch_.current();
  if (lanes_detected_)
    hb.outside_gpu_processes = outside_;
  if (probes_->has_probes())
    hb.busy_probes = busy_probes_;
  if (allocs_.empty())
    return;
  if (!hb.usage)
    hb.usage.emplace();
  for (auto& [id, a] : allocs_) {
    if (a.pgid <= 0)
      continue;
    auto it = std::find_if(hb.usage->begin(), hb.usage->end(),
                           [&](const bus::alloc_usage& u) { return u.allocation == id; });
    if (it == hb.usage->end())
      hb.usage->push_back(bus::alloc_usage{id, 0, a.vram_now});
    else
      it->vram_bytes = a.vram_now;
  }
}

bus::result<std::filesystem::path> gpu_supervisor::clear_fault(const std::string& reason,
                                                               const std::string& by,
                                                               std::int64_t wall_now_ms) {
  auto r = latch_.clear(reason, by, wall_now_ms);
  if (r)
    spdlog::warn("kernel GPU fault cleared by {} ({}); archived as {}", by, reason, r->string());
  return r;
}

} // namespace cq::node
