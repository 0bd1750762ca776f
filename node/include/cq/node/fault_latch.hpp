#pragma once
// Kernel GPU-fault latch (SPEC section 5, Linux): the node follows the kernel
// log for NVIDIA Xid errors; an Xid that means the GPU itself is unhealthy
// latches a fault, written to `<state>/KERNEL-FAULT.json` and kept across
// restarts. While latched, the daemon stops its own GPU allocations (reason
// "fault"; never an outside process), refuses GPU launches and reports the
// fault in every heartbeat. Only the Owner clears it (clear_fault order): the
// file is archived as `KERNEL-FAULT.<ms>.json` with the reason, who cleared it
// and when; it is never deleted.
//
// Invariants:
//  1. Once latch() returned true, KERNEL-FAULT.json exists (or the write error
//     was logged and the latch holds in memory for this process's life).
//  2. A later Xid while latched does not replace the first fault.
//  3. clear() never deletes the fault record: it renames it, with the clearing
//     recorded inside, and a crash between the two steps is completed by load().
//
// Used only by the node daemon's loop thread.

#include "cq/bus/protocol.hpp"
#include "cq/node/files.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cq::node {

class node_disk;

/// One NVIDIA Xid line of the kernel log.
struct xid_event {
  std::int64_t xid = 0;
  std::string device; ///< what the driver names in parentheses, e.g. "PCI:0000:3b:00"
  std::string line;   ///< the line from "NVRM:" on (kernel timestamp and prefixes dropped)
};

/// Parses a kernel log line for `NVRM: Xid (DEVICE): NN, ...` (also with a
/// dmesg timestamp or a /dev/kmsg record prefix in front). nullopt for any
/// other line.
std::optional<xid_event> parse_xid_line(std::string_view line);

/// What an Xid means for the GPU's health (see fault_latch.cpp for the lists
/// and the reasoning).
enum class xid_class {
  hardware,    ///< the GPU or its link is unhealthy: latch
  application, ///< a fault of one program's work: the driver recovered; no latch
  unknown,     ///< not classified: logged, no latch
};
xid_class classify_xid(std::int64_t xid);
std::string_view to_string(xid_class c);

/// The message text of one /dev/kmsg record ("prio,seq,usec,flags;text\n
/// continuation..."): the text after the first ';' up to the end of its line.
/// A string without ';' is returned whole (trailing newline dropped).
std::string_view kmsg_record_text(std::string_view record);

/// Follows a kernel log: /dev/kmsg (a character device: one record per read)
/// or a regular file that grows (tests). Starts at the current end, so only
/// lines written after open() are seen. Reads never block; a missing or
/// unreadable log is retried by reopen() (the caller decides how often).
class kernel_log_follower {
public:
  explicit kernel_log_follower(std::filesystem::path path) : path_(std::move(path)) {}
  ~kernel_log_follower();
  kernel_log_follower(const kernel_log_follower&) = delete;
  kernel_log_follower& operator=(const kernel_log_follower&) = delete;

  /// Opens the log and seeks to its end. Errors name the file.
  status open();
  bool is_open() const { return fd_ >= 0; }
  /// The descriptor (for poll), or -1.
  int fd() const { return fd_; }

  /// Returns the complete lines appended since the last call (at most about
  /// `max_bytes` read per call; the rest comes next time). A regular file that
  /// shrank (rotated, truncated) is followed from its new start.
  std::vector<std::string> read_lines(std::size_t max_bytes = 64 * 1024);

  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool is_device_ = false; ///< /dev/kmsg: record-per-read semantics
  std::uint64_t offset_ = 0;
  std::string partial_; ///< a regular file's incomplete last line
};

/// The latched fault of this node, persisted as `<state>/KERNEL-FAULT.json`.
class fault_latch {
public:
  fault_latch(node_disk& disk, std::filesystem::path state_dir);
  /// The same on the machine's own disk (node/adapters/disk.cpp).
  explicit fault_latch(std::filesystem::path state_dir);

  /// Reads KERNEL-FAULT.json if present (finishing an interrupted clear).
  /// A corrupt file still latches (device "unknown", the file's problem in the
  /// message): a fault record is never ignored.
  status load(std::int64_t now_ms);

  const std::optional<bus::fault_info>& current() const { return fault_; }
  bool latched() const { return fault_.has_value(); }

  /// Latches `e` at `now_ms` unless a fault is latched already. True if it
  /// latched now; a failed write goes to `*write_error` (the latch still holds).
  bool latch(const xid_event& e, std::int64_t now_ms, std::optional<std::string>* write_error);

  /// Archives KERNEL-FAULT.json as KERNEL-FAULT.<now_ms>.json with `reason`,
  /// `by` and the time recorded in it, then clears the latch. Returns the
  /// archive's path; errc::not_found when nothing is latched.
  bus::result<std::filesystem::path> clear(const std::string& reason, const std::string& by,
                                           std::int64_t now_ms);

  std::filesystem::path file() const { return dir_ / "KERNEL-FAULT.json"; }

private:
  node_disk* disk_;
  std::filesystem::path dir_;
  std::optional<bus::fault_info> fault_;
};

/// JSON of a fault record (the fields of fault_info).
std::string fault_to_json(const bus::fault_info& f);
/// Parses fault_to_json()'s output; an error says what is wrong.
bus::result<bus::fault_info> fault_from_json(std::string_view text);

} // namespace cq::node
