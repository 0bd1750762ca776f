#include "auth/auth.hpp"
#include "store/store.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

using namespace cq;
using namespace cq::coord;

namespace {
struct temp_db {
  std::filesystem::path dir;
  temp_db() {
    char tmpl[] = "/tmp/cq-store-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~temp_db() { std::filesystem::remove_all(dir); }
  std::string path() const { return (dir / "cq.db").string(); }
};
} // namespace

TEST_CASE("committed rows are there after the store is reopened") {
  temp_db t;
  job_row j;
  j.info.id = "j1";
  j.seq = 1;
  j.info.name = "x";
  j.info.owner = "me";
  j.info.state = "queued";
  j.info.argv = {"sh", "-c", "echo 'a b'"};
  j.info.cwd = "/";
  j.info.ram_bytes = 42;
  j.env = {{"A", "1"}};
  {
    store s(t.path());
    REQUIRE_FALSE(s.apply({j, audit_row{1, "me", "owner", "submit", "j1", "queued"}}));
    j.info.state = "running";
    REQUIRE_FALSE(s.apply({j}));
  }
  store s(t.path());
  auto snap = s.load();
  REQUIRE(snap.jobs.size() == 1);
  CHECK(snap.jobs[0].info.state == "running");
  CHECK(snap.jobs[0].info.argv == j.info.argv);
  CHECK(snap.jobs[0].env == j.env);
  CHECK(snap.jobs[0].info.ram_bytes == 42u);
  CHECK_FALSE(snap.jobs[0].info.exit_code);
}

TEST_CASE("a batch that fails leaves nothing behind") {
  temp_db t;
  store s(t.path());
  job_row a;
  a.info.id = "a", a.seq = 1, a.info.state = "queued";
  job_row b;
  b.info.id = "b", b.seq = 1, b.info.state = "queued"; // same seq: UNIQUE violation
  CHECK(s.apply({a, b}));
  CHECK(s.load().jobs.empty());
}

TEST_CASE("tokens and invite codes are stored only as hashes") {
  auto t = new_token();
  CHECK(t.size() == 3 + 64);
  CHECK(hash_secret(t) != t);
  CHECK(hash_secret(t) == hash_secret(t));
  CHECK(new_token() != t);
  CHECK(new_uuid().size() == 36);
}
