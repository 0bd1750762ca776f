#include "cq/node/holds.hpp"
#include "cq/node/seams.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>
#if defined(__APPLE__)
#include <sys/random.h> // getentropy
#endif

#include <algorithm>
#include <fstream>
#include <sstream>

namespace cq::node {

std::string random_hex_id() {
  unsigned char b[16] = {};
  // getentropy: Linux (glibc 2.25) and macOS alike; at most 256 bytes a call.
  if (::getentropy(b, sizeof b) != 0)
    spdlog::error("getentropy failed: ids are not random");
  std::string out;
  for (auto c : b)
    out += fmt::format("{:02x}", c);
  return out;
}

hold_store::hold_store(node_disk& disk, std::filesystem::path file,
                       std::function<std::string()> new_id)
    : disk_(&disk), file_(std::move(file)), new_id_(std::move(new_id)) {
  auto text = disk.read(file_);
  if (!text)
    return;
  try {
    auto j = nlohmann::json::parse(*text);
    for (auto& h : j.at("holds")) {
      bus::hold_info hi;
      hi.id = h.at("id").get<std::string>();
      hi.lane = h.at("lane").get<std::string>();
      hi.allocation = h.at("allocation").get<std::string>();
      hi.reason = h.at("reason").get<std::string>();
      hi.at_ms = h.at("at_ms").get<std::int64_t>();
      holds_.push_back(std::move(hi));
      cgroups_.push_back(h.value("cgroup", std::string()));
    }
    if (j.contains("leftover_cgroups"))
      leftovers_ = j.at("leftover_cgroups").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    auto aside = file_;
    aside += ".corrupt";
    (void)disk.rename(file_, aside);
    spdlog::error("{} is unreadable ({}); moved aside to {}: CHECK THE MACHINE, holds it held are "
                  "not reported",
                  file_.string(), e.what(), aside.string());
    holds_.clear();
    cgroups_.clear();
    leftovers_.clear();
  }
}

std::string hold_store::add(std::string lane, std::string allocation, std::string reason,
                            std::int64_t at_ms, std::string cgroup) {
  bus::hold_info h{new_id_(), std::move(lane), std::move(allocation), std::move(reason), at_ms};
  auto id = h.id;
  holds_.push_back(std::move(h));
  cgroups_.push_back(std::move(cgroup));
  save();
  return id;
}

bool hold_store::release(const std::string& id, std::string* cgroup) {
  auto it = std::find_if(holds_.begin(), holds_.end(), [&](auto& h) { return h.id == id; });
  if (it == holds_.end())
    return false;
  auto i = static_cast<std::size_t>(it - holds_.begin());
  auto group = cgroups_[i];
  holds_.erase(it);
  cgroups_.erase(cgroups_.begin() + static_cast<std::ptrdiff_t>(i));
  // A cgroup shared by several holds (one per lane) is free once none owns it.
  if (cgroup && std::find(cgroups_.begin(), cgroups_.end(), group) == cgroups_.end())
    *cgroup = group;
  save();
  return true;
}

void hold_store::add_leftover(const std::string& dir) {
  if (dir.empty() || std::find(leftovers_.begin(), leftovers_.end(), dir) != leftovers_.end())
    return;
  leftovers_.push_back(dir);
  save();
}

void hold_store::remove_leftover(const std::string& dir) {
  auto it = std::find(leftovers_.begin(), leftovers_.end(), dir);
  if (it == leftovers_.end())
    return;
  leftovers_.erase(it);
  save();
}

void hold_store::save() const {
  nlohmann::json arr = nlohmann::json::array();
  for (std::size_t i = 0; i < holds_.size(); ++i) {
    auto& h = holds_[i];
    arr.push_back({{"id", h.id},
                   {"lane", h.lane},
                   {"allocation", h.allocation},
                   {"reason", h.reason},
                   {"at_ms", h.at_ms},
                   {"cgroup", cgroups_[i]}});
  }
  nlohmann::json j = {{"holds", arr}, {"leftover_cgroups", leftovers_}};
  auto text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (auto st = disk_->write_atomic(file_, text); !st)
    spdlog::error("holds are not persisted: {}", st.error().message);
}

} // namespace cq::node
