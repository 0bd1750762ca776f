// The store's watch over its database file (store::check_file): it notices
// the file deleted or replaced, and looking costs the commits nothing.
#include "store/store.hpp"

#include <catch2/catch.hpp>

#include "scratch_dir.hpp"

#include <sys/stat.h>

#include <ctime>
#include <filesystem>

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
