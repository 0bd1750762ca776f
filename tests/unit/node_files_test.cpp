// The node's grouped record writes on the real disk (node/adapters/files.hpp:
// write_files_atomic): each file's result is its own, a failed one leaves
// nothing behind, and the others are written whole. And the state roots'
// inode flag (node_disk::spread_subdirs, ADR 0061), a removal's move into
// the trash (node_disk::move_aside, ADR 0072), and a start's syncs issued
// side by side (node_disk::sync_together, ADR 0077).
#include "node/adapters/adapters.hpp"
#include "node/adapters/files.hpp"
#include "node/adapters/sync_crew.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/fs.h>
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using cq::test::read_text;
using cq::test::temp_dir;

TEST_CASE("a group of records is written whole, each file's result its own, with no temporary "
          "file left") {
  temp_dir t("cq-files");
  fs::create_directories(t.path / "a1");
  fs::create_directories(t.path / "a2");
  REQUIRE(cq::node::write_file_atomic(t.path / "a1" / "exit.json", "old\n"));
  std::vector<cq::node::file_write> group{
      {t.path / "a1" / "exit.json", "{\"a\":1}\n"},
      {t.path / "missing" / "exit.json", "{\"b\":2}\n"},
      {t.path / "a2" / "exit.json", "{\"c\":3}\n", 0600},
      {t.path / "a2" / "other.json", "{}\n"},
  };
  // One after another, or side by side on a crew (ADR 0077): the same.
  cq::node::sync_crew crew(3);
  bool with_crew = GENERATE(false, true);
  auto written = cq::node::write_files_atomic(group, with_crew ? &crew : nullptr);
  REQUIRE(written.size() == 4);
  CHECK(written[0]);
  REQUIRE_FALSE(written[1]);
  CHECK(written[1].error().message.find("missing") != std::string::npos);
  CHECK(written[2]);
  CHECK(written[3]);
  CHECK(read_text(t.path / "a1" / "exit.json") == "{\"a\":1}\n"); // replaced
  CHECK(read_text(t.path / "a2" / "exit.json") == "{\"c\":3}\n");
  CHECK(read_text(t.path / "a2" / "other.json") == "{}\n");
  CHECK((fs::status(t.path / "a2" / "exit.json").permissions() & fs::perms::group_read) ==
        fs::perms::none);
  CHECK_FALSE(fs::exists(t.path / "missing"));
  for (auto& e : fs::recursive_directory_iterator(t.path))
    CHECK(e.path().extension() != ".tmp");
  CHECK(cq::node::write_files_atomic({}).empty());
}

TEST_CASE("a large group is written in parts, and a file named twice ends with its last content") {
  temp_dir t("cq-files");
  std::vector<cq::node::file_write> group;
  for (int i = 0; i < 150; ++i) {
    auto dir = t.path / ("a" + std::to_string(i % 3));
    fs::create_directories(dir);
    group.push_back({dir / ("f" + std::to_string(i)), std::to_string(i) + "\n"});
  }
  group.push_back({t.path / "a0" / "f0", "again\n"}); // f0 is in the group already
  cq::node::sync_crew crew(3);
  auto written = cq::node::write_files_atomic(group, GENERATE(false, true) ? &crew : nullptr);
  REQUIRE(written.size() == group.size());
  for (auto& w : written)
    CHECK(w);
  CHECK(read_text(t.path / "a2" / "f149") == "149\n");
  CHECK(read_text(t.path / "a0" / "f0") == "again\n");
  for (auto& e : fs::recursive_directory_iterator(t.path))
    CHECK(e.path().extension() != ".tmp");
}

TEST_CASE("the machine disk makes missing directories and lists each new one's parent to sync") {
  temp_dir t("cq-dirs");
  auto& disk = cq::node::machine_disk_instance();
  cq::node::node_disk::pending_syncs later;
  // Two levels missing under one that exists: the deepest's parent first.
  REQUIRE(disk.make_dirs_later(t.path / "jobs" / "j1" / "state", later));
  CHECK(fs::is_directory(t.path / "jobs" / "j1" / "state"));
  CHECK(later ==
        cq::node::node_disk::pending_syncs{t.path / "jobs" / "j1", t.path / "jobs", t.path});
  // One missing in one that exists; then one that exists: nothing to sync.
  later.clear();
  REQUIRE(disk.make_dirs_later(t.path / "jobs" / "j2", later));
  CHECK(later == cq::node::node_disk::pending_syncs{t.path / "jobs"});
  later.clear();
  REQUIRE(disk.make_dirs_later(t.path / "jobs" / "j2", later));
  CHECK(later.empty());
  // A file in the way, at the end or above it: refused, nothing to sync.
  std::FILE* f = std::fopen((t.path / "file").c_str(), "w");
  REQUIRE(f);
  std::fclose(f);
  auto refused = disk.make_dirs_later(t.path / "file", later);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("Not a directory") != std::string::npos);
  CHECK_FALSE(disk.make_dirs_later(t.path / "file" / "sub", later));
  CHECK(later.empty());
  REQUIRE(disk.make_dirs(t.path / "a" / "b"));
  CHECK(fs::is_directory(t.path / "a" / "b"));
}
#ifdef __linux__
// Hidden from the whole run (unit.spread_subdirs): it needs a file system
// that keeps inode flags under the temporary directory, and says skip (77)
// on one that keeps none (tmpfs).
TEST_CASE("the machine disk asks the file system to spread a directory's subdirectories",
          "[.inode_flags]") {
  temp_dir t("cq-spread");
  auto flags_of = [](const fs::path& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int flags = -1;
    if (fd >= 0 && ::ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0)
      flags = -1;
    if (fd >= 0)
      ::close(fd);
    return flags;
  };
  auto set_topdir = [](const fs::path& dir) { // chattr +T, as the test's own probe
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int flags = 0;
    bool ok = fd >= 0 && ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 &&
              (flags |= FS_TOPDIR_FL, ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0);
    if (fd >= 0)
      ::close(fd);
    return ok;
  };
  fs::create_directories(t.path / "probe");
  auto before = flags_of(t.path);
  if (before < 0 || !set_topdir(t.path / "probe")) {
    WARN("skipped: " << t.path.string() << "'s file system keeps no such inode flag");
    std::error_code ec;
    fs::remove_all(t.path, ec);
    std::exit(77);
  }
  REQUIRE_FALSE(before & FS_TOPDIR_FL);
  auto& disk = cq::node::machine_disk_instance();
  REQUIRE(disk.spread_subdirs(t.path));
  auto after = flags_of(t.path);
  CHECK(after == (before | FS_TOPDIR_FL)); // no other flag changed
  REQUIRE(disk.spread_subdirs(t.path));    // again: already set
  CHECK(flags_of(t.path) == after);
  CHECK_FALSE(disk.spread_subdirs(t.path / "missing"));
  // A subdirectory made there does not inherit the flag: only the roots
  // spread their children, an allocation's own directories stay together.
  fs::create_directories(t.path / "a1" / "control");
  CHECK_FALSE(flags_of(t.path / "a1") & FS_TOPDIR_FL);
}
#endif

TEST_CASE("the machine disk moves a tree aside whole, and never onto another one (ADR 0072)") {
  temp_dir t("cq-trash");
  auto& disk = cq::node::machine_disk_instance();
  REQUIRE(disk.make_dirs(t.path / "allocations" / "a1" / "control"));
  REQUIRE(disk.write_atomic(t.path / "allocations" / "a1" / "exit.json", "{}"));
  REQUIRE(disk.make_dirs(t.path / "trash"));
  REQUIRE(disk.move_aside(t.path / "allocations" / "a1", t.path / "trash" / "a1"));
  CHECK_FALSE(disk.exists(t.path / "allocations" / "a1"));
  CHECK(disk.exists(t.path / "trash" / "a1" / "exit.json"));
  CHECK(disk.is_directory(t.path / "trash" / "a1" / "control"));
  // A name already in the trash with something in it: refused, nothing moved.
  REQUIRE(disk.make_dirs(t.path / "allocations" / "a1"));
  REQUIRE(disk.write_atomic(t.path / "allocations" / "a1" / "alloc.json", "{}"));
  CHECK_FALSE(disk.move_aside(t.path / "allocations" / "a1", t.path / "trash" / "a1"));
  CHECK(disk.exists(t.path / "allocations" / "a1" / "alloc.json"));
  CHECK(disk.exists(t.path / "trash" / "a1" / "exit.json"));
}

TEST_CASE("a sync crew runs every task of a batch once, side by side, and callers' batches at "
          "once (ADR 0077)") {
  // Each task waits until all four have begun: run in turn, the first would
  // wait out its deadline and the count would fall short.
  cq::node::sync_crew crew(3);
  for (int round = 0; round < 3; ++round) { // batches reuse the helpers
    std::mutex m;
    std::condition_variable cv;
    int begun = 0, met = 0;
    std::vector<std::function<void()>> tasks;
    for (int i = 0; i < 4; ++i)
      tasks.emplace_back([&] {
        std::unique_lock lock(m);
        ++begun;
        cv.notify_all();
        if (cv.wait_for(lock, std::chrono::seconds(5), [&] { return begun == 4; }))
          ++met;
      });
    crew.run(tasks);
    CHECK(begun == 4);
    CHECK(met == 4);
  }
  std::vector<std::function<void()>> none;
  crew.run(none); // an empty batch returns at once
  // Two callers' batches run at once (a start's syncs and an exit record's
  // are not queued behind each other): four tasks of two batches meet.
  std::mutex m;
  std::condition_variable cv;
  int begun = 0, met = 0;
  auto meeting = [&] {
    std::unique_lock lock(m);
    ++begun;
    cv.notify_all();
    if (cv.wait_for(lock, std::chrono::seconds(5), [&] { return begun == 4; }))
      ++met;
  };
  std::vector<std::function<void()>> first{meeting, meeting}, second{meeting, meeting};
  std::thread other([&] { crew.run(second); });
  crew.run(first);
  other.join();
  CHECK(met == 4);
  // A task that throws: the others still run, and the caller gets it after.
  std::atomic<int> ran{0};
  std::vector<std::function<void()>> throwing;
  for (int i = 0; i < 4; ++i)
    throwing.emplace_back([&, i] {
      ++ran;
      if (i == 2)
        throw std::runtime_error("task 2");
    });
  CHECK_THROWS_WITH(crew.run(throwing), "task 2");
  CHECK(ran == 4);
}

TEST_CASE("the machine disk syncs a start's records and directories together: each once, both "
          "lists cleared, the first failure named") {
  temp_dir t("cq-sync-together");
  auto& disk = cq::node::machine_disk_instance();
  cq::node::node_disk::pending_syncs files, dirs;
  REQUIRE(disk.make_dirs_later(t.path / "allocations" / "a1", dirs));
  REQUIRE(disk.make_dirs_later(t.path / "allocations" / "a2", dirs));
  REQUIRE(disk.write_once_later(t.path / "allocations" / "a1" / "alloc.json", "{}", files, dirs));
  REQUIRE(disk.write_once_later(t.path / "allocations" / "a2" / "alloc.json", "{}", files, dirs));
  REQUIRE(files.size() == 2);
  REQUIRE(disk.sync_together(files, dirs));
  CHECK(files.empty());
  CHECK(dirs.empty());
  CHECK(read_text(t.path / "allocations" / "a2" / "alloc.json") == "{}");
  // A directory gone before its sync: its failure comes back, named, and
  // both lists are cleared all the same (a failed sync is not tried again).
  REQUIRE(disk.write_once_later(t.path / "allocations" / "a1" / "more.json", "{}", files, dirs));
  dirs.push_back(t.path / "gone");
  auto failed = disk.sync_together(files, dirs);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().message.find((t.path / "gone").string()) != std::string::npos);
  CHECK(files.empty());
  CHECK(dirs.empty());
}
