#include "disk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace cq::sim {

namespace {

node::status missing_parent(const std::filesystem::path& p) {
  return bus::error_info{errc::internal, fmt::format("{}: no such directory (simulated disk)",
                                                     p.parent_path().string())};
}

/// What a child's name follows in its key: directory `k` and a slash.
std::string child_prefix(const std::string& k) {
  return k == "/" ? k : k + "/";
}

/// Key `k` (normal: no trailing slash) split into its directory's key and
/// its name, by its string: no path is parsed on a node's start path.
std::pair<std::string, std::string> split_key(const std::string& k) {
  auto slash = k.rfind('/');
  if (slash == std::string::npos)
    return {std::string(), k};
  return {k.substr(0, std::max<std::size_t>(slash, 1)), k.substr(slash + 1)};
}

} // namespace

std::string sim_disk::key(const std::filesystem::path& p) {
  // The daemon's paths are already normal (absolute, no "." or ".." parts,
  // no doubled slashes): only others pay for lexically_normal.
  const auto& raw = p.native();
  if (!raw.empty() && raw.find("//") == std::string::npos && raw.find("/.") == std::string::npos &&
      raw.front() != '.' && (raw.size() == 1 || raw.back() != '/'))
    return raw;
  auto s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/')
    s.pop_back();
  return s;
}

bool sim_disk::dir_now(const std::string& k) const {
  if (k == "/" || k.empty())
    return true;
  auto it = dirs_.find(k);
  return it != dirs_.end() && it->second.now;
}

sim_disk::file& sim_disk::file_at(const std::string& k) {
  auto [it, fresh] = files_.try_emplace(k);
  if (fresh) {
    auto [dir, name] = split_key(k);
    children_[dir].insert(std::move(name));
  }
  return it->second;
}

void sim_disk::sync_dir(const std::string& d) {
  // fsync of a directory makes its entries durable: a removal, and the
  // existence (not the content) of a file created by an append.
  unsynced_dirs_.erase(d); // made durable below
  auto kids = children_.find(d);
  if (kids == children_.end())
    return; // nothing was made in it (nor by write_once_later)
  auto prefix = child_prefix(d);
  for (auto name = kids->second.begin(); name != kids->second.end();) {
    ++sync_visits;
    auto it = files_.find(prefix + *name); // d is a key: so is this
    if (it == files_.end()) {
      // A directory made without a sync (make_dir_unsynced) is there for good.
      if (auto sub = dirs_.find(prefix + *name); sub != dirs_.end() && sub->second.now)
        sub->second.durable = true;
      ++name;
      continue;
    }
    auto& e = it->second;
    if (!e.now)
      e.durable.reset();
    else if (!e.durable)
      e.durable.emplace();
    // A removal made durable leaves nothing to remember: the directory
    // stays as short as what it holds (a node's outbox would grow with
    // every report it ever sent, and each sync would walk them all).
    if (!e.now && !e.durable) {
      files_.erase(it);
      name = kids->second.erase(name);
      continue;
    }
    ++name;
  }
  settle_files(d);
}

std::optional<node::status> sim_disk::injected(std::string_view op,
                                               const std::filesystem::path& p) {
  if (exempt || !faults_.fail)
    return std::nullopt;
  auto why = faults_.fail(op, p);
  if (!why)
    return std::nullopt;
  return node::status{
      bus::error_info{errc::internal, fmt::format("{}: {} (simulated)", p.string(), *why)}};
}

std::optional<node::status> sim_disk::refused_write(const std::filesystem::path& f,
                                                    const std::string& d) {
  if (auto e = injected("write", f))
    return *e;
  if (!dir_now(d))
    return missing_parent(f);
  return std::nullopt;
}

node::status sim_disk::write_atomic(const std::filesystem::path& f, std::string_view data,
                                    unsigned) {
  auto k = key(f);
  auto d = split_key(k).first;
  if (auto refused = refused_write(f, d))
    return *refused;
  auto& e = file_at(k);
  e.now = std::string(data);
  e.durable = e.now;
  sync_dir(d);
  fsyncs += 2;
  return node::done{};
}

node::status sim_disk::write_once(const std::filesystem::path& f, std::string_view data,
                                  unsigned mode) {
  if (exists_key(key(f)))
    return bus::error_info{errc::internal, fmt::format("cannot create {}: it exists", f.string())};
  return write_atomic(f, data, mode); // the same durability once it returns
}

node::status sim_disk::write_once_later(const std::filesystem::path& f, std::string_view data,
                                        pending_syncs& files, pending_syncs& dirs, unsigned) {
  auto k = key(f);
  auto d = split_key(k).first;
  if (auto refused = refused_write(f, d))
    return *refused;
  if (exists_key(k))
    return bus::error_info{errc::internal, fmt::format("cannot create {}: it exists", f.string())};
  file_at(k).now = std::string(data); // durable: sync_files, then sync_dirs
  unsynced_files_[d].push_back(k);
  files.emplace_back(k);
  dirs.emplace_back(d);
  return node::done{};
}

node::status sim_disk::sync_files(pending_syncs& files) {
  pending_syncs todo;
  todo.swap(files); // cleared either way, as the machine's
  for (auto& f : todo) {
    if (auto e = injected("sync", f))
      return *e;
    ++fsyncs;
    auto k = key(f);
    auto it = files_.find(k);
    if (it == files_.end() || !it->second.now)
      continue;
    // Its content is durable from now on: with its entry once that is (a
    // directory sync, settle_files), at once where the entry already is.
    auto born = unsynced_files_.find(split_key(k).first);
    if (born != unsynced_files_.end() &&
        std::find(born->second.begin(), born->second.end(), k) != born->second.end())
      synced_content_[k] = *it->second.now;
    else if (it->second.durable)
      it->second.durable = it->second.now;
  }
  return node::done{};
}

void sim_disk::settle_files(const std::string& d) {
  // Files made in `d` by write_once_later: there after a power loss from now
  // on, with the content a sync_files gave them, else empty (a file whose
  // data never reached the platter).
  auto born = unsynced_files_.find(d);
  if (born == unsynced_files_.end())
    return;
  for (auto& f : born->second) {
    ++sync_visits;
    auto e = files_.find(f);
    auto content = synced_content_.find(f);
    if (e != files_.end() && e->second.now)
      e->second.durable = content != synced_content_.end() ? content->second : "";
    if (content != synced_content_.end())
      synced_content_.erase(content);
  }
  unsynced_files_.erase(born);
}

node::status sim_disk::write_volatile(const std::filesystem::path& f, std::string_view data,
                                      unsigned) {
  if (auto e = injected("write", f))
    return *e;
  auto k = key(f);
  if (!dir_now(split_key(k).first))
    return missing_parent(f);
  file_at(k).now = std::string(data); // a power loss takes it back
  return node::done{};
}

node::status sim_disk::append(const std::filesystem::path& f, std::string_view text) {
  if (auto e = injected("append", f))
    return *e;
  auto k = key(f);
  if (!dir_now(split_key(k).first))
    return missing_parent(f);
  auto& e = file_at(k);
  if (!e.now)
    e.now.emplace();
  *e.now += text;
  return node::done{};
}

node::status sim_disk::make_dirs(const std::filesystem::path& d) {
  // Up from `d` (a key: normal, no trailing slash) until a directory that is
  // there for good, by its string: no path is parsed on a node's start path.
  for (auto k = key(d); !k.empty() && k != "/";) {
    auto& e = dirs_[k];
    if (e.now && e.durable)
      break;
    if (!e.now)
      ++fsyncs; // the machine's make_dirs syncs the parent of each one it made
    e.now = e.durable = true;
    auto [parent, name] = split_key(k);
    children_[parent].insert(std::move(name));
    k = std::move(parent);
  }
  return node::done{};
}

node::status sim_disk::make_dir_unsynced(const std::filesystem::path& d) {
  auto k = key(d);
  auto [parent, name] = split_key(k);
  if (!dir_now(parent))
    return missing_parent(d);
  auto& e = dirs_[k];
  if (!e.now) // durable once its parent is synced (sync_dir, sync_dirs)
    unsynced_dirs_[parent].push_back(k);
  e.now = true;
  children_[parent].insert(std::move(name));
  return node::done{};
}

node::status sim_disk::make_dirs_later(const std::filesystem::path& d, pending_syncs& later) {
  // Up from `d` until a directory that is there: each one made is durable
  // once its parent is synced (sync_dirs).
  for (auto k = key(d); !k.empty() && k != "/";) {
    auto& e = dirs_[k];
    if (e.now)
      break;
    e.now = true;
    auto [parent, name] = split_key(k);
    children_[parent].insert(std::move(name));
    unsynced_dirs_[parent].push_back(k);
    later.emplace_back(parent);
    k = std::move(parent);
  }
  return node::done{};
}

node::status sim_disk::sync_dirs(pending_syncs& dirs) {
  // Only the directories made for this sync are visited: a node's
  // allocations/ holds every allocation it kept, and a walk of all of them
  // per start would make a long run quadratic.
  std::set<std::string> synced;
  pending_syncs todo;
  todo.swap(dirs); // cleared either way, as the machine's
  for (auto& d : todo)
    if (auto k = key(d); synced.insert(k).second) {
      ++fsyncs;
      auto made = unsynced_dirs_.find(k);
      if (made == unsynced_dirs_.end()) {
        settle_files(k);
        continue;
      }
      // The plan may fail the sync that makes a directory's entry durable
      // (named by that directory). A failed sync is not tried again
      // (node_disk::sync_dirs): what it was to make durable stays lost at a
      // power loss, and a later sync of `k` does not visit it (a fault there
      // would name an earlier start than the one it fails). A durable write
      // into `k` (write_atomic, rename: sync_dir) still makes them durable:
      // that models a later fsync of the directory writing its entries
      // again, which a kernel that dropped them after the error may not do;
      // the node does not rely on either.
      for (auto& sub : made->second)
        if (auto e = injected("sync", sub)) {
          if (faults_.lost)
            for (auto& other : made->second)
              if (other != sub)
                faults_.lost(other);
          unsynced_dirs_.erase(made);
          unsynced_files_.erase(k); // lost as well
          return *e;
        }
      for (auto& sub : made->second) {
        ++sync_visits;
        if (auto e = dirs_.find(sub); e != dirs_.end() && e->second.now)
          e->second.durable = true;
      }
      unsynced_dirs_.erase(made);
      settle_files(k);
    }
  return node::done{};
}

std::optional<std::string> sim_disk::read(const std::filesystem::path& f, std::size_t max) {
  auto it = files_.find(key(f));
  if (it == files_.end() || !it->second.now)
    return std::nullopt;
  return it->second.now->substr(0, max);
}

bool sim_disk::exists_key(const std::string& k) const {
  auto it = files_.find(k);
  return (it != files_.end() && it->second.now) || dir_now(k);
}

bool sim_disk::exists(const std::filesystem::path& p) {
  return exists_key(key(p));
}

bool sim_disk::is_directory(const std::filesystem::path& p) {
  return dir_now(key(p));
}

std::vector<std::string> sim_disk::list(const std::filesystem::path& d) {
  ++listings;
  auto k = key(d);
  std::vector<std::string> names;
  auto kids = children_.find(k);
  if (kids == children_.end())
    return names;
  auto prefix = child_prefix(k);
  for (auto& name : kids->second) // sorted: a std::set
    if (exists_key(prefix + name))
      names.push_back(name);
  return names;
}

node::status sim_disk::rename(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (auto e = injected("rename", to))
    return *e;
  auto it = files_.find(key(from));
  if (it == files_.end() || !it->second.now)
    return bus::error_info{errc::internal, fmt::format("{}: no such file", from.string())};
  if (!dir_now(key(to.parent_path())))
    return missing_parent(to);
  auto content = *it->second.now;
  // The production rename syncs the target's directory: both names are durable.
  it->second.now.reset();
  it->second.durable.reset();
  auto& e = file_at(key(to));
  e.now = content;
  e.durable = content;
  sync_dir(key(to.parent_path()));
  ++fsyncs;
  return node::done{};
}

node::status sim_disk::remove(const std::filesystem::path& p) {
  auto it = files_.find(key(p));
  if (it != files_.end())
    it->second.now.reset(); // not synced: it may come back after a power loss
  return node::done{};
}

void sim_disk::remove_under(const std::string& k) {
  if (auto f = files_.find(k); f != files_.end())
    f->second.now.reset();
  if (auto d = dirs_.find(k); d != dirs_.end())
    d->second.now = false;
  // Everything ever made under `k` is listed in its directory's children.
  if (auto kids = children_.find(k); kids != children_.end()) {
    auto prefix = child_prefix(k);
    for (auto& name : kids->second)
      remove_under(prefix + name);
  }
}

node::status sim_disk::remove_tree(const std::filesystem::path& p) {
  // Not synced, as the machine's remove_all: a power loss may bring it back.
  remove_under(key(p));
  return node::done{};
}

node::status sim_disk::move_aside(const std::filesystem::path& from, const std::filesystem::path&) {
  return remove_tree(from);
}

bus::result<node::node_disk::chunk> sim_disk::read_at(const std::filesystem::path& f,
                                                      std::uint64_t offset, std::size_t max) {
  auto it = files_.find(key(f));
  if (it == files_.end() || !it->second.now)
    return bus::error_info{errc::not_found, fmt::format("{} does not exist", f.string())};
  chunk c;
  auto& s = *it->second.now;
  c.size = s.size();
  if (offset < s.size())
    c.data = s.substr(static_cast<std::size_t>(offset), max);
  return c;
}

bool sim_disk::survives(const std::filesystem::path& p) const {
  auto k = key(p);
  if (auto f = files_.find(k); f != files_.end()) {
    if (!f->second.now || f->second.durable != f->second.now)
      return false;
  } else if (auto d = dirs_.find(k); d == dirs_.end() || !d->second.durable) {
    return false;
  }
  for (auto dir = split_key(k).first; !dir.empty() && dir != "/"; dir = split_key(dir).first)
    if (auto d = dirs_.find(dir); d == dirs_.end() || !d->second.durable)
      return false;
  return true;
}

void sim_disk::write_back() {
  for (auto& [k, d] : dirs_)
    d.durable = d.now;
  for (auto& [k, e] : files_)
    e.durable = e.now;
  unsynced_dirs_.clear();
  unsynced_files_.clear();
  synced_content_.clear();
}

std::size_t sim_disk::power_loss() {
  std::size_t changed = 0;
  unsynced_dirs_.clear(); // what they name is gone below
  unsynced_files_.clear();
  synced_content_.clear();
  for (auto it = dirs_.begin(); it != dirs_.end();) {
    if (!it->second.durable) {
      it = dirs_.erase(it);
      continue;
    }
    it->second.now = true;
    ++it;
  }
  // In path order: a torn append draws from the fault plan, and a run must
  // replay the same draws.
  std::vector<std::string> paths;
  paths.reserve(files_.size());
  for (auto& [k, e] : files_)
    paths.push_back(k);
  std::sort(paths.begin(), paths.end());
  for (auto& path : paths) {
    auto it = files_.find(path);
    auto& e = it->second;
    if (e.now != e.durable)
      ++changed;
    // A torn append: part of what was appended since the last durable write
    // reached the platter.
    if (faults_.torn && e.now && e.durable && e.now->size() > e.durable->size() &&
        e.now->compare(0, e.durable->size(), *e.durable) == 0)
      e.durable =
          e.now->substr(0, e.durable->size() + faults_.torn(e.now->size() - e.durable->size()));
    e.now = e.durable;
    // A file whose directory is gone is gone too.
    if (!e.now || !dir_now(key(std::filesystem::path(it->first).parent_path())))
      files_.erase(it);
  }
  return changed;
}

} // namespace cq::sim
