// Unit tests of the ground library (cq_ground): size and duration parsing, ages, JSON.
#include "cq/bus/protocol.hpp"
#include "cq/gap_vector.hpp"
#include "cq/growth.hpp"
#include "cq/help_format.hpp"
#include "cq/json.hpp"
#include "cq/units.hpp"

#include <catch2/catch.hpp>

#include <random>

using cq::parse_duration_ms;
using cq::parse_size;

namespace {
std::optional<std::uint64_t> size(std::string_view s) {
  std::string error;
  return parse_size(s, error);
}
std::optional<std::uint64_t> duration(std::string_view s) {
  std::string error;
  return parse_duration_ms(s, error);
}
} // namespace

TEST_CASE("sizes use binary units in every spelling") {
  CHECK(size("4096") == 4096u);
  CHECK(size("1K") == 1024u);
  CHECK(size("1kib") == 1024u);
  CHECK(size("512M") == 512ull << 20);
  CHECK(size("1.5G") == 3ull << 29);
  CHECK(size("1.5 GiB") == 3ull << 29);
  CHECK(size(" 2T ") == 2ull << 40);
  CHECK(size("18446744073709551615") == UINT64_MAX);
}

TEST_CASE("a bad size is refused with a reason") {
  for (auto bad :
       {"", "-1", "nan", "inf", "1e3", "1X", "G", "1.2.3", "18446744073709551616", "16777216T"}) {
    std::string error;
    CHECK_FALSE(parse_size(bad, error));
    CHECK_FALSE(error.empty());
  }
}

TEST_CASE("a plain number of seconds is a duration") {
  CHECK(duration("90") == 90'000u);
  CHECK(duration("1.5") == 1'500u);
  CHECK(duration(" 2 ") == 2'000u);
  CHECK(duration(".25") == 250u);
  CHECK(duration("0.0015") == 1u);
}

TEST_CASE("durations take ms, s, m, h and d, alone or combined") {
  CHECK(duration("500ms") == 500u);
  CHECK(duration("90s") == 90'000u);
  CHECK(duration("10m") == 600'000u);
  CHECK(duration("2h") == 7'200'000u);
  CHECK(duration("1d") == 86'400'000u);
  CHECK(duration("1h30m") == 5'400'000u);
  CHECK(duration("1d2h3m4s5ms") == 93'784'005u);
  CHECK(duration("1h 30m") == 5'400'000u);
  CHECK(duration("1.5h") == 5'400'000u);
  CHECK(duration("2H") == 7'200'000u);
  CHECK(duration("18446744073709551615ms") == UINT64_MAX);
}

TEST_CASE("a bad duration is refused with a reason") {
  for (auto bad : {"",
                   "  ",
                   "-1",
                   "-5m",
                   "nan",
                   "inf",
                   "infinity",
                   "1e3",
                   "+5",
                   "10x",
                   "5 min",
                   "h",
                   "1h30",
                   "30 1h",
                   "1h1h",
                   "1.2.3",
                   "0",
                   "0s",
                   "0h0m",
                   "0.0001",
                   "18446744073709551616ms",
                   "18446744073709551615s",
                   "213503982334601d"}) {
    std::string error;
    CHECK_FALSE(parse_duration_ms(bad, error));
    CHECK_FALSE(error.empty());
  }
}

TEST_CASE("the reason for a bad duration says what is wrong") {
  std::string error;
  CHECK_FALSE(parse_duration_ms("10x", error));
  CHECK(error.find("unknown unit 'x'") != std::string::npos);
  CHECK_FALSE(parse_duration_ms("0", error));
  CHECK(error.find("zero") != std::string::npos);
  CHECK_FALSE(parse_duration_ms("-1", error));
  CHECK(error.find("negative") != std::string::npos);
  CHECK_FALSE(parse_duration_ms("99999999999999999999d", error));
  CHECK(error.find("too long") != std::string::npos);
}

TEST_CASE("durations are printed with their two largest units") {
  using cq::format_duration_ms;
  CHECK(format_duration_ms(0) == "0s");
  CHECK(format_duration_ms(500) == "500ms");
  CHECK(format_duration_ms(45'999) == "45s");
  CHECK(format_duration_ms(600'000) == "10m");
  CHECK(format_duration_ms(5'400'000) == "1h30m");
  CHECK(format_duration_ms(3'605'000) == "1h");
  CHECK(format_duration_ms(93'784'005) == "1d2h");
  CHECK(duration(format_duration_ms(5'400'000)) == 5'400'000u);
}

TEST_CASE("ages are short") {
  CHECK(cq::format_age(59'999) == "59s");
  CHECK(cq::format_age(3'600'000) == "1h");
  CHECK(cq::format_age(49 * 3'600'000LL) == "2d");
  CHECK(cq::format_age(-5) == "0s");
}

TEST_CASE("protocol structs become JSON with the wire's field names") {
  cq::bus::job_info j;
  j.id = "j1";
  j.argv = {"echo", "hi"};
  j.ram_bytes = 1024;
  auto out = cq::to_json(cq::bus::submit_rep{j});
  CHECK(out["job"]["id"] == "j1");
  CHECK(out["job"]["argv"][1] == "hi");
  CHECK(out["job"]["ram_bytes"] == 1024);
  CHECK(out["job"]["pinned_node"].is_null());
  CHECK(cq::dump_json(cq::to_json(cq::bus::node_ls_req{})) == "{}");
  cq::bus::show_rep shown;
  shown.waiting = {"node a: needs 2 free lanes, has 1"};
  auto show = cq::to_json(shown);
  CHECK(show["waiting"][0] == "node a: needs 2 free lanes, has 1");
  CHECK(show["job"]["after"].is_array());
  cq::bus::logs_rep bytes;
  bytes.data = "\xff ok";
  CHECK_NOTHROW(cq::dump_json(cq::to_json(bytes)));
}

TEST_CASE("the streaming JSON writer writes exactly what the document's dump writes") {
  cq::bus::show_rep shown;
  auto& j = shown.job;
  j.id = "j1";
  j.name = "quote \" back\\slash\ttab \x01 caf\xc3\xa9 bad\xff\xfe end";
  j.argv = {"echo", "", "\n"};
  j.ram_bytes = 1024;
  j.exit_code = -3;
  j.after = {"a", "b"};
  j.state = cq::bus::job_state::running;
  shown.waiting = {"node a: needs 2 free lanes, has 1"};
  cq::bus::ls_rep listing;
  listing.jobs = {j, cq::bus::job_info{}};
  listing.total = 2;
  CHECK(cq::json_text(shown) == cq::dump_json(cq::to_json(shown)));
  CHECK(cq::json_text(listing) == cq::dump_json(cq::to_json(listing)));
  CHECK(cq::json_text(cq::bus::node_ls_req{}) == "{}");
  cq::bus::job_spec spec;
  spec.argv = {"true"};
  spec.env = {{"A", "1"}, {"\x7f", "del"}, {"Z", "\xe2\x82"}};
  CHECK(cq::json_text(spec) == cq::dump_json(cq::to_json(spec)));
  cq::bus::logs_rep bytes;
  bytes.data = "\xff ok";
  CHECK(cq::json_text(bytes) == cq::dump_json(cq::to_json(bytes)));
}

TEST_CASE("cq submit --array takes Slurm's syntax: ranges, lists, steps and a limit",
          "[cli][array]") {
  std::string why;
  auto a = cq::parse_array("0-3%2", 100, why);
  REQUIRE(a);
  CHECK(a->indexes == std::vector<std::uint64_t>{0, 1, 2, 3});
  CHECK(a->limit == 2u);
  a = cq::parse_array("1,5,7-9:2", 100, why);
  REQUIRE(a);
  CHECK(a->indexes == std::vector<std::uint64_t>{1, 5, 7, 9});
  CHECK_FALSE(a->limit);
  CHECK_FALSE(cq::parse_array("9-0", 100, why));
  CHECK(why.find("'9-0'") != std::string::npos);
  CHECK_FALSE(cq::parse_array("1,1", 100, why));
  CHECK(why.find("twice") != std::string::npos);
  CHECK_FALSE(cq::parse_array("0-200", 100, why));
  CHECK(why.find("more than 100") != std::string::npos);
  CHECK_FALSE(cq::parse_array("0-9%0", 100, why));
  CHECK_FALSE(cq::parse_array("", 100, why));
  CHECK_FALSE(cq::parse_array("a-b", 100, why));
}

TEST_CASE("make_room grows a vector by doubling, never by the one it needs", "[unit]") {
  std::vector<int> v;
  int reallocations = 0;
  bool stayed = true;
  for (int i = 0; i < 10'000; ++i) {
    auto before = v.capacity();
    cq::make_room(v);
    if (v.capacity() != before)
      ++reallocations;
    auto* at = v.data();
    v.push_back(i); // never reallocates after make_room
    stayed = stayed && v.data() == at;
  }
  CHECK(stayed);
  CHECK(reallocations <= 15);
  cq::make_room(v, 50'000); // a batch larger than the doubling
  CHECK(v.capacity() >= 60'000);
}

TEST_CASE("a gap_vector keeps the order of a vector under random inserts and erases", "[unit]") {
  std::mt19937 rng(20261206);
  cq::gap_vector<int> g;
  std::vector<int> v;
  for (int step = 0; step < 20'000; ++step) {
    auto n = v.size();
    auto roll = rng() % 10;
    if (n == 0 || roll < 5) { // insert, mostly near an end
      std::size_t i = roll < 2 ? n : roll < 3 ? 0 : rng() % (n + 1);
      g.make_room();
      auto at = g.insert(g.begin() + static_cast<std::ptrdiff_t>(i), step);
      REQUIRE(*at == step);
      v.insert(v.begin() + static_cast<std::ptrdiff_t>(i), step);
    } else { // erase, mostly near the front
      std::size_t i = roll < 8 ? rng() % std::min<std::size_t>(n, 3) : rng() % n;
      auto next = g.erase(g.begin() + static_cast<std::ptrdiff_t>(i));
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
      REQUIRE(next - g.begin() == static_cast<std::ptrdiff_t>(i));
    }
    REQUIRE(g.size() == v.size());
    if (step % 97 == 0) {
      auto s = g.span();
      REQUIRE(std::equal(s.begin(), s.end(), v.begin(), v.end()));
    }
  }
  auto s = g.span();
  CHECK(std::equal(s.begin(), s.end(), v.begin(), v.end()));
}

TEST_CASE("a gap_vector erases at its front without moving what follows", "[unit]") {
  // Counts moves: erasing 10,000 elements from the front of 20,000 moves each
  // remaining element a bounded number of times, not once per erase.
  struct counted {
    int v = 0;
    long* moves = nullptr;
    counted() = default;
    counted(int x, long* m) : v(x), moves(m) {}
    counted(const counted&) = default;
    counted(counted&& o) noexcept : v(o.v), moves(o.moves) { ++*moves; }
    counted& operator=(const counted&) = default;
    counted& operator=(counted&& o) noexcept {
      v = o.v, moves = o.moves;
      ++*moves;
      return *this;
    }
  };
  long moves = 0;
  cq::gap_vector<counted> g;
  for (int i = 0; i < 20'000; ++i) {
    g.make_room();
    g.push_back(counted{i, &moves});
  }
  moves = 0;
  for (int i = 0; i < 10'000; ++i)
    g.erase(g.begin());
  CHECK(g.size() == 10'000);
  CHECK(g.begin()->v == 10'000);
  CHECK(moves <= 4 * 20'000); // a vector's erase: 150 million
}

TEST_CASE("--help descriptions are wrapped at blanks to the columns given, each line of their "
          "own on its own, and no word is lost") {
  using cq::help_formatter;
  CHECK(help_formatter::joined("", 10).empty());
  CHECK(help_formatter::joined("one two three four", 9) == "one two\nthree\nfour");
  CHECK(help_formatter::joined("a b\nc d e f", 3) == "a b\nc d\ne f");
  CHECK(help_formatter::joined("ends here\n", 80) == "ends here\n");
  CHECK(help_formatter::joined("a-word-longer-than-the-width b", 5) ==
        "a-word-longer-than-the-width\nb");
  CHECK(cq::wrap_words("naïve café au lait", 10) ==
        std::vector<std::string>{"naïve café", "au lait"});
}
