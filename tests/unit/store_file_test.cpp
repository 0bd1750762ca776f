// The store's watch over its database file (store::check_file): it notices
// the file deleted or replaced, and looking costs the commits nothing. The
// write-ahead log's space, written ahead of its commits (docs/adr/0069).
#include "store/store.hpp"
#include "store/store_files.hpp"

#include <catch2/catch.hpp>

#include "scratch_dir.hpp"

#include <sys/stat.h>

#include <ctime>
#include <filesystem>
#include <fstream>

using namespace cq;
using namespace cq::coord;

namespace {

/// A batch of one queued job with seq `seq`.
change_batch one_job(std::uint64_t seq) {
  job_row j;
  j.info.id = "job-" + std::to_string(seq), j.seq = seq, j.info.state = job_state::queued;
  j.info.priority = "medium", j.info.argv = {"true"}, j.info.cwd = "/";
  return {j};
}

struct stat stat_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st;
}

timespec mtime_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mtim;
}

} // namespace

TEST_CASE("the store notices its database file deleted or replaced under it") {
  test::temp_dir t("cq-store");
  auto path = (t.path / "cq.db").string();
  store s(path);
  CHECK_FALSE(s.check_file());
  std::filesystem::copy_file(path, path + ".copy");
  std::filesystem::remove(path);
  auto gone = s.check_file();
  REQUIRE(gone);
  CHECK(gone->find("deleted") != std::string::npos);
  std::filesystem::rename(path + ".copy", path);
  auto replaced = s.check_file();
  REQUIRE(replaced);
  CHECK(replaced->find("replaced") != std::string::npos);
}

TEST_CASE("checking the database file leaves the next commit's write-ahead log time "
          "coarse") {
  // Where the kernel keeps multigrain timestamps (Linux 6.13 and later), a
  // file whose times were read gets a fine-grained time at its next write,
  // which dirties its inode: on ext4 without a journal each fdatasync of the
  // log then writes the inode as well. The check before every commit asks
  // only for identities, so the commit after it stamps the log with the
  // coarse clock, which is never later than the time read just before that
  // commit; a fine-grained stamp is. Any other process's fine-grained stamp
  // can move the coarse clock past it: one round of twenty suffices.
  test::temp_dir t("cq-store");
  auto path = (t.path / "cq.db").string();
  store s(path);
  int coarse = 0;
  for (std::uint64_t round = 0; round < 20 && coarse == 0; ++round) {
    REQUIRE_FALSE(s.apply(one_job(2 * round + 1))); // after our read below: a fine stamp
    REQUIRE_FALSE(s.check_file());
    timespec before{};
    REQUIRE(::clock_gettime(CLOCK_REALTIME, &before) == 0);
    REQUIRE_FALSE(s.apply(one_job(2 * round + 2)));
    auto stamp = mtime_of(path + "-wal");
    coarse += stamp.tv_sec < before.tv_sec ||
              (stamp.tv_sec == before.tv_sec && stamp.tv_nsec < before.tv_nsec);
  }
  CHECK(coarse == 1);
}

TEST_CASE("the write-ahead log's space is there before the commits that fill it") {
  // A commit that grows the log makes its fdatasync write the inode and the
  // block bitmap too (ext4 without a journal): the store writes the space
  // at open, and its commits overwrite blocks the file already has.
  test::temp_dir t("cq-store");
  auto path = (t.path / "cq.db").string();
  store s(path);
  auto wal = path + "-wal";
  auto before = stat_of(wal);
  CHECK(static_cast<std::uint64_t>(before.st_size) >= wal_reserve_bytes);
  for (std::uint64_t seq = 1; seq <= 300; ++seq)
    REQUIRE_FALSE(s.apply(one_job(seq)));
  auto after = stat_of(wal);
  CHECK(after.st_size == before.st_size);
  CHECK(after.st_blocks == before.st_blocks);
}

TEST_CASE("a store whose log ends in reserved zeros recovers every commit") {
  // The files as a power loss leaves them: copied while the store is open,
  // the log holding commits not yet checkpointed and the reserved zeros
  // after them. SQLite reads frames up to the first invalid one.
  test::temp_dir t("cq-store");
  auto path = (t.path / "cq.db").string();
  auto copy = (t.path / "copy.db").string();
  {
    store s(path);
    for (std::uint64_t seq = 1; seq <= 50; ++seq)
      REQUIRE_FALSE(s.apply(one_job(seq)));
    for (const char* suffix : {"", "-wal"})
      std::filesystem::copy_file(path + suffix, copy + suffix);
  }
  CHECK(static_cast<std::uint64_t>(stat_of(copy + "-wal").st_size) >= wal_reserve_bytes);
  store reopened(copy);
  auto snap = reopened.load();
  CHECK(snap.damaged.empty());
  REQUIRE(snap.jobs.size() == 50);
  CHECK(snap.info(49).id == "job-50");
  CHECK(reopened.check().empty());
  REQUIRE_FALSE(reopened.apply(one_job(51))); // and it takes commits after them
  CHECK(reopened.load().jobs.size() == 51);
}

TEST_CASE("reserving the log's space leaves a longer log alone and a missing one missing") {
  test::temp_dir t("cq-store");
  auto missing = (t.path / "none-wal").string();
  CHECK_FALSE(reserve_wal(missing));
  CHECK_FALSE(std::filesystem::exists(missing));
  auto longer = (t.path / "long-wal").string();
  std::ofstream(longer).put('x');
  std::filesystem::resize_file(longer, 2 * wal_reserve_bytes);
  CHECK(reserve_wal(longer));
  CHECK(std::filesystem::file_size(longer) == 2 * wal_reserve_bytes);
}
