// Unit tests of the api's arrays by id and name (coordinator/api/
// array_index.hpp): whatever jobs are added, end or leave, and whenever the
// index is built or reset, bus::array_named over its candidates answers as
// over every job, and an array's tasks are the walk's, in submission order.
#include "coordinator/api/array_index.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

/// As the api's job_entry: a job_info and its submission seq.
struct entry : cq::bus::job_info {
  std::uint64_t seq = 0;
};
using jobs_map = std::unordered_map<std::string, entry>;
using node = jobs_map::value_type;
using cq::coord::api_impl::array_index;

/// bus::array_named's answer, as a comparable string ("error: ..." for one).
std::string answer(const cq::bus::result<std::string>& r) {
  return r ? *r : "error: " + r.error().message;
}

} // namespace

TEST_CASE("an array lookup answers as a walk of every job, and lists the tasks in order",
          "[unit]") {
  std::mt19937 rng(20261206);
  jobs_map jobs;
  std::map<std::uint64_t, node*> by_seq;
  array_index<node> ix;
  std::vector<std::string> arrays; // every array id made, gone or not
  std::uint64_t seq = 0;
  auto add = [&](const cq::bus::job_info& info) {
    entry j;
    static_cast<cq::bus::job_info&>(j) = info;
    j.seq = ++seq;
    auto [at, fresh] = jobs.try_emplace(j.id, j);
    REQUIRE(fresh);
    by_seq[seq] = &*at;
    ix.add(&*at);
  };
  auto hex = [&] { return fmt::format("{:08x}-{:04x}", rng(), rng() % 0x10000); };
  for (int step = 0; step < 4000; ++step) {
    auto roll = rng() % 100;
    if (roll < 30) { // a plain job, sometimes named as an array is
      cq::bus::job_info j;
      j.id = hex();
      j.name = fmt::format("sweep{}", rng() % 6);
      add(j);
    } else if (roll < 40) { // an array: a few tasks, a shared name, some prefix-alike ids
      auto id = rng() % 3 == 0 && !arrays.empty()
                    ? arrays[rng() % arrays.size()].substr(0, 6) + hex()
                    : hex();
      arrays.push_back(id);
      auto name = fmt::format("sweep{}", rng() % 6);
      auto n = 1 + rng() % 5;
      for (std::uint64_t i = 1; i <= n; ++i) {
        cq::bus::job_info t;
        t.id = hex();
        t.array = id;
        t.array_index = i;
        t.name = rng() % 20 == 0 ? "odd" : fmt::format("{}-{}", name, i);
        add(t);
      }
    } else if (roll < 55 && !jobs.empty()) { // a job ends
      auto it = std::next(jobs.begin(), static_cast<std::ptrdiff_t>(rng() % jobs.size()));
      it->second.state = cq::bus::job_state::succeeded;
    } else if (roll < 57) { // finished jobs leave the history
      for (auto it = jobs.begin(); it != jobs.end();) {
        if (cq::bus::is_terminal(it->second.state) && rng() % 2 == 0) {
          by_seq.erase(it->second.seq);
          it = jobs.erase(it);
        } else {
          ++it;
        }
      }
      ix.reset();
    } else { // a lookup: an id, a prefix, a name, or nothing
      std::string ref;
      auto kind = rng() % 5;
      if (kind == 0 && !arrays.empty())
        ref = arrays[rng() % arrays.size()];
      else if (kind == 1 && !arrays.empty())
        ref = arrays[rng() % arrays.size()].substr(0, 1 + rng() % 8);
      else if (kind == 2)
        ref = fmt::format("sweep{}", rng() % 7);
      else if (kind == 3)
        ref = "odd";
      else
        ref = hex();
      auto walked = cq::bus::array_named(ref, [&](auto f) {
        for (auto& [s, n] : by_seq)
          f(n->second);
      });
      auto indexed = cq::bus::array_named(ref, [&](auto f) {
        ix.each_candidate(by_seq, ref, [&](const cq::bus::job_info& j) { f(j); });
      });
      REQUIRE(answer(indexed) == answer(walked));
      if (walked && !walked->empty()) {
        std::vector<std::string> want, got;
        for (auto& [s, n] : by_seq)
          if (n->second.array == *walked)
            want.push_back(n->first);
        for (const node* n : ix.tasks(by_seq, *walked))
          got.push_back(n->first);
        REQUIRE(got == want);
      }
    }
  }
  CHECK(ix.tasks(by_seq, "no-such-array").empty());
}
