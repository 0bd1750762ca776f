// Unit tests of the api's sorted job ids (coordinator/api/id_index.hpp):
// whatever order ids are added and erased in, sorted() lists exactly the
// ids present, in order, as the tree it replaced did.
#include "coordinator/api/id_index.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <random>
#include <set>
#include <string>

using cq::coord::api_impl::id_index;

namespace {

std::vector<std::string> strings_of(const id_index& ix) {
  std::vector<std::string> out;
  for (const auto* id : ix.sorted())
    out.push_back(*id);
  return out;
}

} // namespace

TEST_CASE("the sorted ids list every id added and not erased, in order", "[unit]") {
  std::mt19937 rng(20261206);
  std::deque<std::string> strings; // stable addresses, as the read model's keys
  std::set<std::string> expected;
  id_index ix;
  auto add = [&](std::string s) {
    strings.push_back(std::move(s));
    expected.insert(strings.back());
    ix.add(&strings.back());
  };
  auto hex = [&] {
    static const char digits[] = "0123456789abcdef";
    std::string s(12, '0');
    for (auto& c : s)
      c = digits[rng() % 16];
    return s;
  };
  SECTION("one id at a time, looked at after each") {
    for (int i = 0; i < 200; ++i) {
      add(hex());
      CHECK(ix.size() == expected.size());
      REQUIRE(strings_of(ix) == std::vector<std::string>(expected.begin(), expected.end()));
    }
  }
  SECTION("many ids between looks (an array's tasks), merged in one pass") {
    for (int round = 0; round < 5; ++round) {
      auto base = hex();
      for (int task = 0; task < 300; ++task)
        add(base + "-" + std::to_string(task));
      for (int i = 0; i < 50; ++i)
        add(hex());
      REQUIRE(strings_of(ix) == std::vector<std::string>(expected.begin(), expected.end()));
    }
  }
  SECTION("ids shorter than eight bytes, and ids one of which begins another") {
    for (const char* s : {"abcdefghi", "ab", "abcdefgh", "a", "ab0", "b", "abcdefgh0", "\xff"})
      add(s);
    add(std::string("ab\0", 3)); // ties with "ab" on its first eight bytes
    add(std::string("ab\0\0\0\0\0\0z", 9));
    REQUIRE(strings_of(ix) == std::vector<std::string>(expected.begin(), expected.end()));
  }
  SECTION("erased by address, sorted or not yet merged") {
    for (int i = 0; i < 100; ++i)
      add(hex());
    (void)ix.sorted();
    for (int i = 0; i < 100; ++i)
      add(hex());
    std::unordered_set<const std::string*> gone;
    for (std::size_t i = 0; i < strings.size(); i += 3) {
      gone.insert(&strings[i]);
      expected.erase(strings[i]);
    }
    ix.erase(gone);
    CHECK(ix.size() == expected.size());
    REQUIRE(strings_of(ix) == std::vector<std::string>(expected.begin(), expected.end()));
  }
  SECTION("ids are erased by address after their strings are gone") {
    std::vector<std::unique_ptr<std::string>> owned;
    for (int i = 0; i < 40; ++i) {
      owned.push_back(std::make_unique<std::string>(hex()));
      ix.add(owned.back().get());
    }
    (void)ix.sorted();
    for (int i = 0; i < 10; ++i) {
      owned.push_back(std::make_unique<std::string>(hex()));
      ix.add(owned.back().get());
    }
    std::unordered_set<const std::string*> gone;
    std::set<std::string> kept;
    for (std::size_t i = 0; i < owned.size(); ++i)
      if (i % 2 == 0) {
        gone.insert(owned[i].get());
        owned[i].reset(); // the index never reads an id it is told to forget
      } else {
        kept.insert(*owned[i]);
      }
    ix.erase(gone);
    REQUIRE(strings_of(ix) == std::vector<std::string>(kept.begin(), kept.end()));
  }
  SECTION("a recovery's ids in any order, then new ones") {
    std::vector<const std::string*> recovered;
    for (int i = 0; i < 100; ++i) {
      strings.push_back(hex());
      expected.insert(strings.back());
      recovered.push_back(&strings.back());
    }
    // Some share their first eight bytes, as an array's tasks do.
    for (int task = 0; task < 20; ++task) {
      strings.push_back("0123abcd-task-" + std::to_string(task));
      expected.insert(strings.back());
      recovered.push_back(&strings.back());
    }
    std::shuffle(recovered.begin(), recovered.end(), rng);
    ix.assign(std::move(recovered));
    for (int i = 0; i < 5; ++i)
      add(hex());
    REQUIRE(strings_of(ix) == std::vector<std::string>(expected.begin(), expected.end()));
  }
}

TEST_CASE("a lookup after each new id does not copy all the ids each time", "[unit]") {
  // One id submitted between lookups (a person's `cq show` prefix) is merged
  // in place; the array it goes into grows by doubling, not by one.
  std::deque<std::string> strings;
  id_index ix;
  std::set<const void*> buffers;
  for (int i = 0; i < 4000; ++i) {
    strings.push_back(fmt::format("{:08x}-job", (i * 2654435761u) % 4294967291u));
    ix.add(&strings.back());
    buffers.insert(ix.sorted().data());
  }
  CHECK(ix.sorted().size() == 4000);
  CHECK(std::is_sorted(ix.sorted().begin(), ix.sorted().end(),
                       [](const std::string* a, const std::string* b) { return *a < *b; }));
  CHECK(buffers.size() <= 16); // 4000 reallocations before
}
