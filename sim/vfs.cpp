// cq-sim's SQLite VFS (see vfs.hpp): the default VFS underneath, with every
// unsynced write remembered so that a power loss can take it back.
#include "vfs.hpp"

#include "store/store.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <vector>

namespace cq::sim {
namespace {

/// One write or truncation since the file's last sync.
struct change {
  bool truncate = false;
  sqlite3_int64 offset = 0;   ///< where the write starts, or the new size
  sqlite3_int64 old_size = 0; ///< the file's size before it
  std::string old_bytes;      ///< what it replaced, within old_size
  std::string new_bytes;      ///< what a write wrote
};

struct file_rec {
  std::string path;
  int open = 0;        ///< handles open on it
  bool tracked = true; ///< its unsynced writes are remembered (not under an untracked dir)
  std::vector<change> unsynced;
};

struct sim_file {
  sqlite3_file base; ///< first: SQLite sees a sqlite3_file
  file_rec* rec;     ///< nullptr for files deleted on close (temporary)
  bool dead;         ///< its process crashed (invariant 1)
};

/// The real file's handle lives after ours, aligned.
constexpr std::size_t real_offset = (sizeof(sim_file) + 15) & ~std::size_t{15};

sqlite3_file* real_of(sqlite3_file* f) {
  return reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(f) + real_offset);
}

sim_file* sim_of(sqlite3_file* f) {
  return reinterpret_cast<sim_file*>(f);
}

struct registry {
  std::mutex m;
  sqlite3_vfs vfs{};
  sqlite3_vfs* real = nullptr;
  std::map<std::string, file_rec> files;
  std::set<sim_file*> handles;
  std::set<std::string> untracked; ///< sim_vfs_untracked()
};

registry& reg() {
  static registry r;
  return r;
}

bool under(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         path[dir.size()] == '/';
}

int x_close(sqlite3_file* f) {
  auto* s = sim_of(f);
  auto* r = real_of(f);
  int rc = r->pMethods ? r->pMethods->xClose(r) : SQLITE_OK;
  std::lock_guard lock(reg().m);
  if (s->rec)
    --s->rec->open;
  reg().handles.erase(s);
  return rc;
}

int x_read(sqlite3_file* f, void* buf, int amt, sqlite3_int64 off) {
  auto* r = real_of(f);
  return r->pMethods->xRead(r, buf, amt, off);
}

/// The change a write of [from, to) or a truncation to `from` (`to` < 0)
/// is about to make: the file's size and the bytes it replaces.
int before_change(sqlite3_file* r, sqlite3_int64 from, sqlite3_int64 to, change& c) {
  c.offset = from;
  if (int rc = r->pMethods->xFileSize(r, &c.old_size); rc != SQLITE_OK)
    return rc;
  auto end = to < 0 ? c.old_size : std::min(to, c.old_size);
  if (from >= end)
    return SQLITE_OK;
  c.old_bytes.resize(static_cast<std::size_t>(end - from));
  return r->pMethods->xRead(r, c.old_bytes.data(), static_cast<int>(end - from), from);
}

/// Remembers `c` once the real call (`rc`) made it.
int remember(sim_file* s, change c, int rc) {
  if (rc == SQLITE_OK) {
    std::lock_guard lock(reg().m);
    s->rec->unsynced.push_back(std::move(c));
  }
  return rc;
}

int x_write(sqlite3_file* f, const void* buf, int amt, sqlite3_int64 off) {
  auto* s = sim_of(f);
  auto* r = real_of(f);
  if (s->dead)
    return SQLITE_IOERR_WRITE;
  if (!s->rec || !s->rec->tracked)
    return r->pMethods->xWrite(r, buf, amt, off);
  change c;
  if (int rc = before_change(r, off, off + amt, c); rc != SQLITE_OK)
    return rc;
  c.new_bytes.assign(static_cast<const char*>(buf), static_cast<std::size_t>(amt));
  return remember(s, std::move(c), r->pMethods->xWrite(r, buf, amt, off));
}

int x_truncate(sqlite3_file* f, sqlite3_int64 size) {
  auto* s = sim_of(f);
  auto* r = real_of(f);
  if (s->dead)
    return SQLITE_IOERR_TRUNCATE;
  if (!s->rec || !s->rec->tracked)
    return r->pMethods->xTruncate(r, size);
  change c;
  c.truncate = true;
  if (int rc = before_change(r, size, -1, c); rc != SQLITE_OK)
    return rc;
  return remember(s, std::move(c), r->pMethods->xTruncate(r, size));
}

int x_sync(sqlite3_file* f, int flags) {
  auto* s = sim_of(f);
  auto* r = real_of(f);
  if (s->dead)
    return SQLITE_IOERR_FSYNC;
  int rc = r->pMethods->xSync(r, flags);
  if (rc == SQLITE_OK && s->rec) {
    std::lock_guard lock(reg().m);
    s->rec->unsynced.clear();
  }
  return rc;
}

int x_file_size(sqlite3_file* f, sqlite3_int64* size) {
  auto* r = real_of(f);
  return r->pMethods->xFileSize(r, size);
}

int x_lock(sqlite3_file* f, int level) {
  // A dead process takes no lock: closing its connection cannot checkpoint.
  if (sim_of(f)->dead)
    return SQLITE_BUSY;
  auto* r = real_of(f);
  return r->pMethods->xLock(r, level);
}

int x_unlock(sqlite3_file* f, int level) {
  auto* r = real_of(f);
  return r->pMethods->xUnlock(r, level);
}

int x_check_reserved(sqlite3_file* f, int* out) {
  auto* r = real_of(f);
  return r->pMethods->xCheckReservedLock(r, out);
}

int x_file_control(sqlite3_file* f, int op, void* arg) {
  auto* r = real_of(f);
  return r->pMethods->xFileControl(r, op, arg);
}

int x_sector_size(sqlite3_file* f) {
  auto* r = real_of(f);
  return r->pMethods->xSectorSize(r);
}

int x_device_characteristics(sqlite3_file* f) {
  auto* r = real_of(f);
  return r->pMethods->xDeviceCharacteristics(r);
}

int x_shm_map(sqlite3_file* f, int region, int size, int extend, void volatile** p) {
  auto* r = real_of(f);
  return r->pMethods->xShmMap(r, region, size, extend, p);
}

int x_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
  auto* r = real_of(f);
  return r->pMethods->xShmLock(r, offset, n, flags);
}

void x_shm_barrier(sqlite3_file* f) {
  auto* r = real_of(f);
  r->pMethods->xShmBarrier(r);
}

int x_shm_unmap(sqlite3_file* f, int delete_flag) {
  auto* r = real_of(f);
  return r->pMethods->xShmUnmap(r, delete_flag);
}

// Version 2: shared memory (WAL), no memory-mapped I/O (every byte goes
// through x_write, so nothing escapes the log).
const sqlite3_io_methods io_methods = {
    2,
    x_close,
    x_read,
    x_write,
    x_truncate,
    x_sync,
    x_file_size,
    x_lock,
    x_unlock,
    x_check_reserved,
    x_file_control,
    x_sector_size,
    x_device_characteristics,
    x_shm_map,
    x_shm_lock,
    x_shm_barrier,
    x_shm_unmap,
    nullptr,
    nullptr,
};

int x_open(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags, int* out_flags) {
  auto& R = reg();
  auto* s = sim_of(f);
  s->base.pMethods = nullptr;
  s->rec = nullptr;
  s->dead = false;
  auto* r = real_of(f);
  std::memset(r, 0, static_cast<std::size_t>(R.real->szOsFile));
  int rc = R.real->xOpen(R.real, name, r, flags, out_flags);
  if (rc != SQLITE_OK)
    return rc;
  std::lock_guard lock(R.m);
  if (name && !(flags & SQLITE_OPEN_DELETEONCLOSE)) {
    auto& rec = R.files[name];
    rec.path = name;
    rec.tracked = std::none_of(R.untracked.begin(), R.untracked.end(),
                               [&](const std::string& d) { return under(rec.path, d); });
    ++rec.open;
    s->rec = &rec;
  }
  R.handles.insert(s);
  s->base.pMethods = &io_methods;
  return SQLITE_OK;
}

int x_delete(sqlite3_vfs*, const char* name, int sync_dir) {
  auto& R = reg();
  int rc = R.real->xDelete(R.real, name, sync_dir);
  std::lock_guard lock(R.m);
  if (auto it = R.files.find(name); it != R.files.end()) {
    it->second.unsynced.clear();
    if (it->second.open == 0)
      R.files.erase(it);
  }
  return rc;
}

bool chance(std::mt19937_64& g, double p) {
  return p > 0 && static_cast<double>(g() >> 11) * 0x1.0p-53 < p;
}

/// Takes `rec` back to its last sync plus the changes `keep` draws.
void lose(file_rec& rec, std::mt19937_64& rng, double keep, power_loss_report& rep) {
  auto* real = reg().real;
  std::vector<char> mem(static_cast<std::size_t>(real->szOsFile));
  auto* h = reinterpret_cast<sqlite3_file*>(mem.data());
  int out = 0;
  if (real->xOpen(real, rec.path.c_str(), h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MAIN_DB, &out) !=
      SQLITE_OK)
    throw std::runtime_error("cq-sim vfs: cannot reopen " + rec.path);
  auto* m = h->pMethods;
  auto check = [&](int rc, const char* what) {
    if (rc != SQLITE_OK) {
      m->xClose(h);
      throw std::runtime_error(std::string("cq-sim vfs: ") + what + " failed on " + rec.path);
    }
  };
  // Back to the last sync: undo every change, latest first.
  for (auto it = rec.unsynced.rbegin(); it != rec.unsynced.rend(); ++it) {
    if (!it->old_bytes.empty())
      check(m->xWrite(h, it->old_bytes.data(), static_cast<int>(it->old_bytes.size()), it->offset),
            "undo write");
    check(m->xTruncate(h, it->old_size), "undo size");
  }
  // What the disk's cache had written out anyway, in order.
  for (auto& c : rec.unsynced) {
    if (!chance(rng, keep)) {
      ++rep.changes_lost;
      continue;
    }
    ++rep.changes_kept;
    if (c.truncate)
      check(m->xTruncate(h, c.offset), "redo truncate");
    else
      check(m->xWrite(h, c.new_bytes.data(), static_cast<int>(c.new_bytes.size()), c.offset),
            "redo write");
  }
  m->xClose(h);
  rec.unsynced.clear();
}

} // namespace

const char* sim_vfs_name() {
  static const char* name = [] {
    auto& R = reg();
    coord::sqlite_without_memory_statistics(); // before SQLite initializes
    R.real = sqlite3_vfs_find(nullptr);
    if (!R.real)
      throw std::runtime_error("cq-sim vfs: no default SQLite VFS");
    R.vfs = *R.real;
    R.vfs.iVersion = std::min(R.real->iVersion, 3);
    R.vfs.szOsFile = static_cast<int>(real_offset) + R.real->szOsFile;
    R.vfs.pNext = nullptr;
    R.vfs.zName = "cq-sim";
    R.vfs.pAppData = nullptr;
    R.vfs.xOpen = x_open;
    R.vfs.xDelete = x_delete;
    if (sqlite3_vfs_register(&R.vfs, 0) != SQLITE_OK)
      throw std::runtime_error("cq-sim vfs: cannot register");
    return "cq-sim";
  }();
  return name;
}

void sim_vfs_crash(const std::string& dir) {
  auto& R = reg();
  std::lock_guard lock(R.m);
  for (auto* s : R.handles)
    if (s->rec && under(s->rec->path, dir))
      s->dead = true;
}

power_loss_report sim_vfs_power_loss(const std::string& dir, std::mt19937_64& rng, double keep) {
  auto& R = reg();
  std::lock_guard lock(R.m);
  power_loss_report rep;
  for (auto& [path, rec] : R.files) {
    if (!under(path, dir) || rec.unsynced.empty())
      continue;
    if (rec.open > 0)
      throw std::logic_error("cq-sim vfs: power loss with " + path + " open");
    ++rep.files;
    lose(rec, rng, keep, rep);
  }
  return rep;
}

void sim_vfs_untracked(const std::string& dir) {
  auto& R = reg();
  std::lock_guard lock(R.m);
  R.untracked.insert(dir);
}

void sim_vfs_forget(const std::string& dir) {
  auto& R = reg();
  std::lock_guard lock(R.m);
  R.untracked.erase(dir);
  for (auto it = R.files.begin(); it != R.files.end();)
    if (under(it->first, dir) && it->second.open == 0)
      it = R.files.erase(it);
    else
      ++it;
}

} // namespace cq::sim
