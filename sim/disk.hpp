#pragma once
// A simulated machine's disk (the node's disk seam, seams.hpp): files and
// directories in memory, each with what is visible now and what would be
// left after a power loss. Durable writes (write_atomic, make_dirs, rename)
// reach both at once, and sync their directory, which makes its entries
// durable too (a removal, a file created by an append or a directory by
// make_dir_unsynced or make_dirs_later, but not appended content); an
// append, a remove or an unsynced directory alone reaches only what is
// visible, and power_loss() takes it back, as a real disk may.
//
// Faults (cq-sim's kind disk_faults): a write_atomic, append or rename the
// plan fails returns the error the adapter would (EIO or ENOSPC at the
// write, the fsync or the rename) and changes nothing visible; a power loss
// keeps a random prefix of the bytes appended since a file's last durable
// write (a torn write). The simulated host's own writes (cq-shim's status
// file, node.toml) are exempt: they stand for other programs.
#include "cq/node/seams.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

namespace cq::sim {

class sim_disk final : public node::node_disk {
public:
  node::status write_atomic(const std::filesystem::path& file, std::string_view data,
                            unsigned mode = 0644) override;
  /// One by one (node_disk's default), counted in `groups`.
  std::vector<node::status> write_atomic_all(const std::vector<node::file_write>& writes) override {
    ++groups;
    largest_group = std::max(largest_group, writes.size());
    return node_disk::write_atomic_all(writes);
  }
  node::status write_once(const std::filesystem::path& file, std::string_view data,
                          unsigned mode = 0644) override;
  /// Visible at once; its content is durable once sync_files named it, and
  /// the file (with that content, else empty) once its directory is synced.
  node::status write_once_later(const std::filesystem::path& file, std::string_view data,
                                pending_syncs& files, pending_syncs& dirs,
                                unsigned mode = 0644) override;
  node::status sync_files(pending_syncs& files) override;
  node::status write_volatile(const std::filesystem::path& file, std::string_view data,
                              unsigned mode = 0644) override;
  node::status append(const std::filesystem::path& file, std::string_view text) override;
  node::status make_dirs(const std::filesystem::path& dir) override;
  node::status make_dir_unsynced(const std::filesystem::path& dir) override;
  node::status make_dirs_later(const std::filesystem::path& dir, pending_syncs& later) override;
  node::status sync_dirs(pending_syncs& dirs) override;
  std::optional<std::string> read(const std::filesystem::path& file, std::size_t max) override;
  bool exists(const std::filesystem::path& p) override;
  bool is_directory(const std::filesystem::path& p) override;
  std::vector<std::string> list(const std::filesystem::path& dir) override;
  node::status rename(const std::filesystem::path& from, const std::filesystem::path& to) override;
  node::status remove(const std::filesystem::path& p) override;
  node::status remove_tree(const std::filesystem::path& p) override;
  /// As remove_tree: the model removes a tree at once, so nothing is left
  /// at `to` for the remover (which finds nothing there).
  node::status move_aside(const std::filesystem::path& from,
                          const std::filesystem::path& to) override;
  bus::result<chunk> read_at(const std::filesystem::path& file, std::uint64_t offset,
                             std::size_t max) override;
  /// The machine loses power: what was not durable is gone. Returns how many
  /// files lost or changed their content.
  std::size_t power_loss();
  /// Whether `p` would be there after a power loss now, as it is now (a
  /// file with its content, a directory), its directories with it.
  bool survives(const std::filesystem::path& p) const;
  /// The kernel's writeback: everything written so far is durable, as it is
  /// on a real machine some seconds later (a test's power loss after a
  /// workload ran a while, its unsynced `leader` file on the platter).
  void write_back();

  struct fault_plan {
    /// Called for each write, append and rename (`op` of `path`); an error
    /// text fails it.
    std::function<std::optional<std::string>(std::string_view op,
                                             const std::filesystem::path& path)>
        fail;
    /// At a power loss: how many of `n` unsynced appended bytes stay.
    std::function<std::size_t(std::size_t n)> torn;
    /// Called for each other path whose entry a failed sync left unsynced
    /// (a sync of allocations/ fails for every allocation a group of starts
    /// made there, not only the one the plan named).
    std::function<void(const std::filesystem::path& path)> lost;
  };
  void set_faults(fault_plan f) { faults_ = std::move(f); }
  /// While true, writes are the host's own (never failed).
  bool exempt = false;
  /// How many directories were listed (a test counts the daemon's reads).
  std::size_t listings = 0;
  /// How many fsyncs the machine's disk (node/adapters/disk.cpp) would have
  /// made for the writes so far: a write_atomic two (the file, its
  /// directory), a rename one, a make_dirs one per directory it created, a
  /// sync_files one per file, a sync_dirs one per directory.
  std::size_t fsyncs = 0;
  /// How many groups write_atomic_all wrote, and the largest one's size.
  std::size_t groups = 0;
  std::size_t largest_group = 0;
  /// How many directory entries syncs visited (a test checks that a sync
  /// costs what it makes durable, not what the directory holds).
  std::size_t sync_visits = 0;

private:
  fault_plan faults_;
  /// The injected failure for `op` on `p`, if the plan picks one.
  std::optional<node::status> injected(std::string_view op, const std::filesystem::path& p);
  /// Why a write of `f` (in directory `d`, a key) fails: an injected fault,
  /// or its directory missing; nullopt when it may go on.
  std::optional<node::status> refused_write(const std::filesystem::path& f, const std::string& d);
  struct file {
    std::optional<std::string> now;     ///< visible content (nullopt: absent)
    std::optional<std::string> durable; ///< content after a power loss (nullopt: absent)
  };
  struct dir {
    bool now = false;
    bool durable = false;
  };
  static std::string key(const std::filesystem::path& p);
  bool dir_now(const std::string& k) const;
  void sync_dir(const std::string& d);
  /// The files write_once_later made in `d`, whose entries a sync of `d`
  /// made durable (their content too where sync_files synced it).
  void settle_files(const std::string& d);
  /// The file at `k`, created (absent) if needed, and listed in its directory.
  file& file_at(const std::string& k);
  bool exists_key(const std::string& k) const;
  /// Marks `k` and everything under it removed (not durably).
  void remove_under(const std::string& k);
  /// Hashed: a node's paths share long prefixes, which a sorted map compares
  /// at every level. What needs an order (a listing, a power loss) sorts.
  std::unordered_map<std::string, file> files_;
  std::unordered_map<std::string, dir> dirs_;
  /// Directory -> the names of the files and directories ever made in it
  /// (listing, syncing and removing visit one directory, not the whole disk).
  std::unordered_map<std::string, std::set<std::string>> children_;
  /// Directory -> the directories made in it by make_dirs_later and not yet
  /// synced (what sync_dirs makes durable).
  std::unordered_map<std::string, std::vector<std::string>> unsynced_dirs_;
  /// Directory -> the files made in it by write_once_later whose entries
  /// are not yet synced; file -> its content when sync_files synced it.
  std::unordered_map<std::string, std::vector<std::string>> unsynced_files_;
  std::unordered_map<std::string, std::string> synced_content_;
};

} // namespace cq::sim
