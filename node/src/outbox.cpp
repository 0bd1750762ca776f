#include "cq/node/outbox.hpp"
#include "cq/node/files.hpp"
#include "cq/node/seams.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <fstream>
#include <sstream>

namespace cq::node {

namespace {

using nlohmann::json;

template <class T>
constexpr bool is_optional_v = false;
template <class T>
constexpr bool is_optional_v<std::optional<T>> = true;

template <class T>
json to_json_value(const T& v) {
  if constexpr (std::is_enum_v<T>)
    return std::string(to_string(v));
  else
    return v;
}
template <class T>
json to_json_value(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

template <class T>
bool from_json_value(const json& j, T& out) {
  if constexpr (std::is_enum_v<T>) {
    return j.is_string() && parse(j.get<std::string>(), out);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string())
      return false;
    out = j.get<std::string>();
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    if (!j.is_number_unsigned())
      return false;
    out = j.get<std::uint64_t>();
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    if (!j.is_number_integer())
      return false;
    out = j.get<std::int64_t>();
  } else {
    static_assert(sizeof(T) == 0, "unsupported field type in a report");
  }
  return true;
}
template <class T>
bool from_json_value(const json& j, std::optional<T>& out) {
  if (j.is_null()) {
    out.reset();
    return true;
  }
  T v{};
  if (!from_json_value(j, v))
    return false;
  out = std::move(v);
  return true;
}

// Parses "<digits>.json" into its seq.
std::optional<std::uint64_t> seq_of(const std::string& name) {
  if (!name.ends_with(".json") || name.size() <= 5)
    return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size() - 5, v);
  if (ec != std::errc{} || p != name.data() + name.size() - 5 || v == 0)
    return std::nullopt;
  return v;
}

} // namespace

std::string report_to_json(const bus::report_req& r) {
  json j = json::object();
  auto copy = r;
  bus::fields([&](const char* key, auto& v) { j[key] = to_json_value(v); }, copy);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

bus::result<bus::report_req> report_from_json(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return bus::error_info{errc::malformed, "not a JSON object"};
  bus::report_req r;
  std::string bad;
  bus::fields(
      [&](const char* key, auto& v) {
        if (!bad.empty())
          return;
        auto it = j.find(key);
        // An optional field may be missing: a report persisted by an earlier
        // version, before the field existed, is still valid.
        if (it == j.end()) {
          if constexpr (!is_optional_v<std::decay_t<decltype(v)>>)
            bad = key;
          return;
        }
        if (!from_json_value(*it, v))
          bad = key;
      },
      r);
  if (!bad.empty())
    return bus::error_info{errc::malformed,
                           fmt::format("field '{}' missing or of the wrong type", bad)};
  return r;
}

bus::result<outbox> outbox::open(node_disk& disk, const std::filesystem::path& dir) {
  if (auto st = disk.make_dirs(dir); !st)
    return st.error();
  if (!disk.is_directory(dir))
    return bus::error_info{errc::internal, fmt::format("cannot list {}", dir.string())};
  outbox box(disk, dir);
  for (auto& name : disk.list(dir)) {
    auto path = dir / name;
    if (name.ends_with(".tmp")) {
      (void)disk.remove(path);
      continue;
    }
    auto seq = seq_of(name);
    if (!seq)
      continue;
    auto text = disk.read(path);
    auto r = text ? report_from_json(*text)
                  : bus::result<bus::report_req>(errc::internal, "cannot read");
    if (!r || r->seq != *seq) {
      spdlog::error("outbox: {} is unreadable ({}); moved aside, this report is lost",
                    path.string(), r ? "seq does not match its name" : r.error().message);
      auto aside = path;
      aside += ".corrupt";
      (void)disk.rename(path, aside);
      box.next_seq_ = std::max(box.next_seq_, *seq + 1);
      continue;
    }
    box.next_seq_ = std::max(box.next_seq_, *seq + 1);
    box.pending_.emplace(*seq, entry{std::move(*r), 0});
  }
  if (auto text = disk.read(dir / "next_seq")) {
    std::uint64_t v = 0;
    auto [p, perr] = std::from_chars(text->data(), text->data() + text->size(), v);
    if (perr == std::errc{})
      box.next_seq_ = std::max(box.next_seq_, v);
  }
  if (!box.pending_.empty())
    spdlog::info("outbox: {} unacknowledged report(s) from an earlier run will be re-sent",
                 box.pending_.size());
  return box;
}

status outbox::add(bus::report_req& r, std::int64_t now_ms, bool persist) {
  r.seq = next_seq_++;
  pending_.insert_or_assign(r.seq, entry{r, now_ms, persist});
  // The counter first, a block of seqs ahead: if we crash before the report
  // is written, or anywhere within the block, the next run starts past the
  // block, so a seq is skipped, never reused (invariant 1).
  status st = done{};
  if (next_seq_ > reserved_until_) {
    auto until = next_seq_ + outbox_seq_block;
    st = disk_->write_atomic(dir_ / "next_seq", fmt::format("{}\n", until));
    if (st)
      reserved_until_ = until;
  }
  if (!persist)
    return st;
  auto st2 = disk_->write_atomic(dir_ / fmt::format("{}.json", r.seq), report_to_json(r));
  if (!st2)
    return st2;
  return st;
}

std::vector<const bus::report_req*> outbox::due(std::int64_t now_ms, std::size_t max) const {
  std::vector<const bus::report_req*> out;
  for (auto& [seq, e] : pending_) {
    if (out.size() >= max)
      break;
    if (e.next_send_ms <= now_ms)
      out.push_back(&e.report);
  }
  return out;
}

void outbox::schedule(std::uint64_t seq, std::int64_t at_ms) {
  if (auto it = pending_.find(seq); it != pending_.end())
    it->second.next_send_ms = at_ms;
}

bool outbox::remove(std::uint64_t seq) {
  auto it = pending_.find(seq);
  if (it == pending_.end())
    return false;
  bool persisted = it->second.persisted;
  pending_.erase(it);
  if (!persisted)
    return true;
  auto file = dir_ / fmt::format("{}.json", seq);
  if (auto st = disk_->remove(file); !st)
    spdlog::warn("outbox: cannot delete {}: {}", file.string(), st.error().message);
  return true;
}

const bus::report_req* outbox::find(std::string_view allocation, std::string_view kind) const {
  for (auto& [seq, e] : pending_)
    if (e.report.allocation == allocation && e.report.kind == kind)
      return &e.report;
  return nullptr;
}

const bus::report_req* outbox::get(std::uint64_t seq) const {
  auto it = pending_.find(seq);
  return it == pending_.end() ? nullptr : &it->second.report;
}

std::vector<std::string> outbox::allocations() const {
  std::vector<std::string> out;
  for (auto& [seq, e] : pending_)
    if (std::find(out.begin(), out.end(), e.report.allocation) == out.end())
      out.push_back(e.report.allocation);
  return out;
}

std::int64_t outbox::next_due_ms() const {
  std::int64_t next = INT64_MAX;
  for (auto& [seq, e] : pending_)
    next = std::min(next, e.next_send_ms);
  return next;
}

} // namespace cq::node
