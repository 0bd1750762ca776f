// Unit tests of the api's jobs by name (coordinator/api/name_index.hpp):
// whatever jobs are added and whenever the index is built or reset, a
// lookup finds exactly the jobs of that name, as the scan it replaced did.
#include "coordinator/api/name_index.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <unordered_map>

namespace {

struct entry {
  std::string name;
};
using jobs_map = std::unordered_map<std::string, entry>;
using node = jobs_map::value_type;
using cq::coord::api_impl::name_index;

std::set<std::string> scan(const jobs_map& jobs, const std::string& name) {
  std::set<std::string> out;
  for (auto& [id, e] : jobs)
    if (!name.empty() && e.name == name)
      out.insert(id);
  return out;
}

std::set<std::string> lookup(name_index<node>& ix, const jobs_map& jobs, const std::string& name) {
  std::set<std::string> out;
  ix.each_named(jobs, name, [&](const node& n) { out.insert(n.first); });
  return out;
}

} // namespace

TEST_CASE("a name lookup finds exactly the jobs of that name", "[unit]") {
  std::mt19937 rng(20261206);
  jobs_map jobs;
  name_index<node> ix;
  int next = 0;
  auto name_of = [&] { // few names, often repeated; some jobs unnamed
    auto k = rng() % 40;
    return k == 0 ? std::string() : fmt::format("train-{}", k);
  };
  for (int step = 0; step < 3000; ++step) {
    auto roll = rng() % 100;
    if (roll < 60) { // a submit
      auto id = fmt::format("{:08x}-job-{}", rng(), next++);
      auto [at, fresh] = jobs.try_emplace(id, entry{name_of()});
      REQUIRE(fresh);
      ix.add(&*at);
    } else if (roll < 63 && !jobs.empty()) { // jobs leave the history
      for (auto it = jobs.begin(); it != jobs.end();)
        it = rng() % 4 == 0 ? jobs.erase(it) : std::next(it);
      ix.reset();
    } else { // a lookup, by a name in use or not
      auto name = rng() % 10 == 0 ? std::string("nobody") : name_of();
      REQUIRE(lookup(ix, jobs, name) == scan(jobs, name));
    }
  }
  for (int k = 1; k < 40; ++k) {
    auto name = fmt::format("train-{}", k);
    CHECK(lookup(ix, jobs, name) == scan(jobs, name));
  }
}
