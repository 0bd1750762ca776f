#include "cq/node/fault_latch.hpp"
#include "cq/node/files.hpp"
#include "cq/node/seams.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace cq::node {

namespace {} // namespace

std::optional<xid_event> parse_xid_line(std::string_view line) {
  // Seen in the wild (driver versions differ in what follows the number):
  //   NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
  //   NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
  //   NVRM: Xid (0000:03:00): 13, 0003 00000000 0000a1c0 ...
  //   [ 1234.5678] NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error ...
  //   6,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, ...      (a /dev/kmsg record)
  auto at = line.find("NVRM: Xid");
  if (at == std::string_view::npos)
    return std::nullopt;
  auto text = trim(line.substr(at));
  if (auto nl = text.find('\n'); nl != std::string_view::npos)
    text = trim(text.substr(0, nl));
  auto rest = text.substr(std::string_view("NVRM: Xid").size());
  while (!rest.empty() && rest.front() == ' ')
    rest.remove_prefix(1);
  xid_event e;
  if (!rest.empty() && rest.front() == '(') {
    auto close = rest.find(')');
    if (close == std::string_view::npos)
      return std::nullopt;
    e.device = std::string(trim(rest.substr(1, close - 1)));
    rest.remove_prefix(close + 1);
  }
  if (rest.empty() || rest.front() != ':')
    return std::nullopt;
  rest.remove_prefix(1);
  while (!rest.empty() && rest.front() == ' ')
    rest.remove_prefix(1);
  std::int64_t xid = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), xid);
  if (ec != std::errc{} || p == rest.data() || xid < 0)
    return std::nullopt;
  // The number must end there ("79," or "79 " or the end), not run into letters.
  if (p != rest.data() + rest.size() && *p != ',' && *p != ' ')
    return std::nullopt;
  e.xid = xid;
  e.line = std::string(text);
  return e;
}

// The classification, from NVIDIA's "Xid Errors" catalogue (XID-Errors.pdf,
// r555) and its GPU debug guidelines. The question is the one the latch asks:
// after this Xid, may the next job be placed on this GPU? Only Xids whose
// documented cause is the GPU, its memory or its link, and whose documented
// recovery is a GPU reset, a node reboot or a field diagnostic, latch. Xids
// that one program's bad work causes (the driver tears that channel down and
// the GPU serves the next program normally) do not: latching on them would let
// any user take a shared machine's GPUs out of service with a buggy kernel.
// Everything else is logged and does not latch.
xid_class classify_xid(std::int64_t xid) {
  switch (xid) {
  // ---- hardware: the GPU is unhealthy until a reset or repair ----
  case 48:  // double-bit (uncorrectable) ECC error: memory contents lost; reset required
  case 61:  // internal micro-controller breakpoint/warning (PMU): firmware state suspect
  case 62:  // internal micro-controller halt: firmware stopped; reset required
  case 63:  // ECC page retirement / row-remap recording event: takes effect only after a reset
  case 64:  // ECC page retirement / row-remap recording failure: bad memory not retired
  case 74:  // NVLink error: the link to a peer GPU or switch is broken
  case 79:  // GPU has fallen off the bus: the device is gone from PCIe
  case 92:  // high single-bit ECC error rate: memory degrading
  case 94:  // contained ECC error: the affected process died; NVIDIA asks for a reset soon
  case 95:  // uncontained ECC error: every process on the GPU affected; reset required
  case 119: // GSP RPC timeout: the GPU System Processor does not answer; reset required
  case 120: // GSP error: GSP firmware failed; reset required
  case 140: // unrecovered ECC error (ECC uncorrectable, newer drivers): reset required
  case 154: // GPU recovery action changed: the driver itself says reset/reboot is required
    return xid_class::hardware;
  // ---- application: one program's fault; the driver recovered the GPU ----
  case 13:  // graphics engine exception: a kernel's illegal instruction or out-of-range access
  case 31:  // GPU memory page fault: a program touched an address it does not map
  case 32:  // invalid or corrupted push buffer stream: driver/program command stream
  case 43:  // GPU stopped processing: the channel of a faulting program was reset
  case 45:  // preemptive cleanup: the driver killed a channel (the program exited or was killed)
  case 68:  // video processor (NVDEC/NVENC) exception: a program's decode/encode stream
  case 69:  // graphics engine class error: a program used an invalid class or method
  case 109: // context switch timeout: a program's context would not yield
    return xid_class::application;
  default:
    return xid_class::unknown;
  }
}

std::string_view to_string(xid_class c) {
  switch (c) {
  case xid_class::hardware:
    return "hardware";
  case xid_class::application:
    return "application";
  case xid_class::unknown:
    break;
  }
  return "unknown";
}

std::string_view kmsg_record_text(std::string_view record) {
  auto semi = record.find(';');
  // The header has no ';' of its own and no newline; anything else is plain text.
  if (semi != std::string_view::npos && record.substr(0, semi).find('\n') == std::string_view::npos)
    record.remove_prefix(semi + 1);
  if (auto nl = record.find('\n'); nl != std::string_view::npos)
    record = record.substr(0, nl);
  return record;
}

// ---- fault_latch --------------------------------------------------------------------

std::string fault_to_json(const bus::fault_info& f) {
  nlohmann::json j = {
      {"xid", f.xid}, {"device", f.device}, {"message", f.message}, {"at_ms", f.at_ms}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

bus::result<bus::fault_info> fault_from_json(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return bus::error_info{errc::invalid_argument, "not a JSON object"};
  bus::fault_info f;
  try {
    f.xid = j.at("xid").get<std::int64_t>();
    f.device = j.value("device", std::string());
    f.message = j.value("message", std::string());
    f.at_ms = j.value("at_ms", std::int64_t{0});
  } catch (const std::exception& e) {
    return bus::error_info{errc::invalid_argument, fmt::format("bad field: {}", e.what())};
  }
  return f;
}

namespace {

/// KERNEL-FAULT.<ms>.json, or with a -N suffix if that name is taken (archives are never
/// overwritten).
std::filesystem::path archive_name(node_disk& disk, const std::filesystem::path& dir,
                                   std::int64_t ms) {
  auto archive = dir / fmt::format("KERNEL-FAULT.{}.json", ms);
  for (int n = 1; disk.exists(archive) && n < 1000; ++n)
    archive = dir / fmt::format("KERNEL-FAULT.{}-{}.json", ms, n);
  return archive;
}

} // namespace

fault_latch::fault_latch(node_disk& disk, std::filesystem::path state_dir)
    : disk_(&disk), dir_(std::move(state_dir)) {}

status fault_latch::load(std::int64_t now_ms) {
  fault_.reset();
  if (!disk_->exists(file()))
    return done{};
  auto text = disk_->read(file());
  if (!text) {
    // Unreadable: latch anyway; a fault record must never be lost by an I/O error.
    auto why = fmt::format("cannot read {}: {}", file().string(), std::strerror(errno));
    fault_ = bus::fault_info{0, "unknown", why, now_ms};
    return bus::error_info{errc::internal, why};
  }
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_object() && j.contains("cleared")) {
    // A clear was interrupted between recording it and the rename: finish it.
    auto at = j["cleared"].value("at_ms", now_ms);
    if (disk_->rename(file(), archive_name(*disk_, dir_, at)))
      return done{};
  }
  auto f = fault_from_json(*text);
  if (!f) {
    fault_ = bus::fault_info{0, "unknown",
                             fmt::format("{} is not a valid fault record ({}); it latches "
                                         "anyway",
                                         file().string(), f.error().message),
                             now_ms};
    return bus::error_info{errc::invalid_argument, fault_->message};
  }
  fault_ = std::move(*f);
  return done{};
}

bool fault_latch::latch(const xid_event& e, std::int64_t now_ms,
                        std::optional<std::string>* write_error) {
  if (fault_)
    return false;
  fault_ = bus::fault_info{e.xid, e.device, e.line, now_ms};
  if (auto st = disk_->write_atomic(file(), fault_to_json(*fault_)); !st && write_error)
    *write_error = st.error().message;
  return true;
}

bus::result<std::filesystem::path> fault_latch::clear(const std::string& reason,
                                                      const std::string& by, std::int64_t now_ms) {
  if (!fault_)
    return bus::error_info{errc::not_found, "no kernel GPU fault is latched on this node"};
  nlohmann::json j = {{"xid", fault_->xid},
                      {"device", fault_->device},
                      {"message", fault_->message},
                      {"at_ms", fault_->at_ms}};
  j["cleared"] = {{"reason", reason}, {"by", by}, {"at_ms", now_ms}};
  auto text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // Step 1: record the clearing in the fault file itself (atomic); step 2:
  // rename it to its archive name. A crash between them is finished by load().
  if (auto st = disk_->write_atomic(file(), text); !st)
    return st.error();
  auto archive = archive_name(*disk_, dir_, now_ms);
  if (auto st = disk_->rename(file(), archive); !st)
    return bus::error_info{errc::internal,
                           fmt::format("cannot archive {} as {}: {}", file().string(),
                                       archive.string(), st.error().message)};
  fault_.reset();
  return archive;
}

} // namespace cq::node
