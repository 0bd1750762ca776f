// Opening a node's state dir for one daemon (daemon.hpp: open_node).
#include "cq/node/daemon.hpp"

#include "cq/node/files.hpp"
#include "cq/node/seams.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace cq::node {

namespace {

/// The state dir's identity, created at its first start.
bus::result<std::string> load_daemon_id(const std::filesystem::path& state_dir, host_probes& probes,
                                        node_disk& disk) {
  auto path = state_dir / "daemon.id";
  if (auto t = disk.read(path, 256)) {
    auto id = std::string(trim(*t));
    if (!id.empty() && is_valid_id(id))
      return id;
  }
  auto id = probes.random_id();
  if (auto w = disk.write_atomic(path, id + "\n", 0600); !w)
    return w.error();
  return id;
}

} // namespace

bus::result<node_setup> open_node(daemon_config cfg, host_probes& probes, node_disk& disk) {
  node_setup s;
  s.alloc_root = cfg.state_dir / "allocations";
  s.jobs_root = cfg.state_dir / "jobs";
  s.trash_root = cfg.state_dir / "trash";
  if (auto made = disk.make_dirs(cfg.state_dir); !made)
    return made.error();
  // SPEC section 10: one state dir, one daemon.
  if (auto locked = probes.lock_for_life(cfg.state_dir / "node.lock"); !locked) {
    if (locked.error().code != errc::already_exists)
      return locked.error();
    return bus::error_info{
        errc::already_exists,
        fmt::format("another cq-node ({}) already runs on the state directory {}; one state "
                    "directory (one node identity) is one daemon",
                    locked.error().message, cfg.state_dir.string())};
  }
  auto id = load_daemon_id(cfg.state_dir, probes, disk);
  if (!id)
    return id.error();
  s.daemon_id = *id;
  for (auto& dir : {s.alloc_root, s.jobs_root}) {
    if (auto made = disk.make_dirs(dir); !made)
      return made.error();
    disk.spread_subdirs(dir); // ADR 0061
  }
  if (auto made = disk.make_dirs(s.trash_root); !made)
    return made.error();
  auto ob = outbox::open(disk, cfg.state_dir / "outbox");
  if (!ob)
    return ob.error();
  s.box.emplace(std::move(*ob));
  s.holds.emplace(disk, cfg.state_dir / "holds.json", [&probes] { return probes.random_id(); });
  for (auto& h : s.holds->all())
    spdlog::warn("HOLD {} on {} (allocation {}): {}; release it after checking the machine", h.id,
                 h.lane.empty() ? "the node" : "lane " + h.lane, h.allocation, h.reason);
  auto mc = probes.detect_memcap(cfg.identity.memory);
  if (!mc)
    return mc.error();
  s.memcap = *mc;
  s.memcap.owner = s.daemon_id.substr(0, 12);
  spdlog::info("memory caps: {}{}{}", to_string(s.memcap.mode),
               s.memcap.parent.empty() ? "" : " under " + s.memcap.parent.string(),
               s.memcap.note.empty() ? "" : " (" + s.memcap.note + ")");
  s.shim = probes.find_shim();
  if (s.shim.empty())
    spdlog::warn("cq-shim not found beside cq-node: workloads are launched directly, and the "
                 "exit status of a job that ends while cq-node is down is lost");
  auto toml_file = cfg.state_dir / "node.toml";
  auto toml_text = disk.read(toml_file);
  auto gpu_cfg = toml_text ? parse_gpu_config(*toml_text, toml_file) : gpu_config{};
  if (!gpu_cfg)
    return gpu_cfg.error();
  probes.platform_gpu_defaults(*gpu_cfg);
  auto gpu_probes = probes.gpu(*gpu_cfg);
  s.gpu = std::make_unique<gpu_supervisor>(std::move(*gpu_cfg), cfg.state_dir,
                                           std::move(gpu_probes), disk);
  s.cfg = std::move(cfg);
  return s;
}

} // namespace cq::node
