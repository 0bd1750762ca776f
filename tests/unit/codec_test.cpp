#include "cq/bus/codec.hpp"

#include <catch2/catch.hpp>

#include "state_names.hpp"
#include <msgpack.hpp>

#include <sys/resource.h>

using namespace cq;
using namespace cq::bus;

namespace {

bus::job_info sample_job() {
  job_info j;
  j.id = "0f4e8c2a-1111-4222-8333-444455556666";
  j.name = "train";
  j.owner = "me";
  j.state = job_state::running;
  j.argv = {"python3", "train.py", "--lr", "0.1"};
  j.cwd = "/home/me";
  j.ram_bytes = 2ull << 30;
  j.pinned_node = "gpu-box";
  j.node = "gpu-box";
  j.allocation = "a1";
  j.attempt = 2;
  j.exit_code = -3;
  j.submitted_ms = 1700000000000;
  return j;
}

template <class T>
T round_trip_request(const T& x) {
  auto bytes = encode_request(42, "cq_token", x);
  std::uint64_t seen = 0;
  auto f = decode_frame(bytes, seen);
  REQUIRE(f);
  CHECK(f->id == 42);
  CHECK(f->op == T::op);
  CHECK(f->token == "cq_token");
  auto back = decode_body<T>(*f);
  REQUIRE(back);
  // Encoding the decoded value gives the same bytes: nothing was lost.
  CHECK(encode_request(42, "cq_token", *back) == bytes);
  return *back;
}

template <class T>
T round_trip_reply(const T& x) {
  auto bytes = encode_reply(7, x);
  std::uint64_t seen = 0;
  auto f = decode_frame(bytes, seen);
  REQUIRE(f);
  CHECK(f->is_reply);
  CHECK(f->ok);
  auto back = decode_body<T>(*f);
  REQUIRE(back);
  CHECK(encode_reply(7, *back) == bytes);
  return *back;
}

std::string pack_envelope(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& body,
                          std::string_view op = "submit") {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(5);
  pk.pack(std::string("v")), pk.pack(1);
  pk.pack(std::string("id")), pk.pack(9);
  pk.pack(std::string("op")), pk.pack(std::string(op));
  pk.pack(std::string("token")), pk.pack(std::string("t"));
  pk.pack(std::string("body"));
  body(pk);
  return std::string(buf.data(), buf.size());
}

error_info refused(const std::string& bytes) {
  std::uint64_t seen = 0;
  auto f = decode_frame(bytes, seen);
  if (!f)
    return f.error();
  auto r = decode_coordinator_request(*f);
  REQUIRE_FALSE(r);
  return r.error();
}

long max_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

} // namespace

TEST_CASE("every client request survives an encode and decode round trip") {
  submit_req s;
  s.spec = {"n", {"sh", "-c", "echo hi"}, "/tmp", {{"PATH", "/bin"}, {"A", ""}}, 1024, "box"};
  auto back = round_trip_request(s);
  CHECK(back.spec.argv == s.spec.argv);
  CHECK(back.spec.env == s.spec.env);
  CHECK(back.spec.ram_bytes == 1024u);
  submit_req bare;
  bare.spec.argv = {"true"};
  bare.spec.cwd = "/";
  CHECK_FALSE(round_trip_request(bare).spec.ram_bytes);
  round_trip_request(ls_req{true, 7});
  round_trip_request(show_req{"job"});
  round_trip_request(logs_req{"job", 10, 100, std::string("alloc")});
  round_trip_request(cancel_req{"job"});
  round_trip_request(node_invite_req{"box"});
  round_trip_request(node_approve_req{"box"});
  round_trip_request(node_ls_req{});
  round_trip_request(preempt_req{"job"});
  CHECK(round_trip_request(terminal_req{"job", "\x03", 24, 80}).rows == 24u);
  CHECK(round_trip_request(events_req{{"j1", "j2"}, 5, 2, 10, 1000}).since == 2u);
  submit_req leased;
  leased.spec.argv = {"true"};
  leased.spec.cwd = "/";
  leased.spec.lease_ms = 60000, leased.spec.lost_after_ms = 0, leased.spec.no_requeue = true;
  leased.spec.retry_oom = 2;
  auto lb = round_trip_request(leased).spec;
  CHECK(lb.lease_ms == 60000u);
  CHECK(lb.lost_after_ms == 0u);
  CHECK(lb.retry_oom == 2u);
}

TEST_CASE("every node message and order survives an encode and decode round trip") {
  round_trip_request(node_join_req{"box", "cqi_x"});
  round_trip_request(heartbeat_req{1 << 30, 1 << 29, 8, {"a1", "a2"}});
  report_req r{5,       "exited", "a1",         "j1", 3, std::nullopt, reason::none,
               1 << 20, 1500,     1700000000000};
  CHECK(round_trip_request(r).exit_code == 3);
  round_trip_request(start_order{"a1", "j1", 1, {"true"}, "/", {{"X", "1"}}, 4096});
  round_trip_request(stop_order{"a1", 10000});
  round_trip_request(read_log_order{"a1", 0, 65536});
  auto t = round_trip_request(terminal_order{"a1", "ls\r", 40, 120});
  CHECK(t.data == "ls\r");
  CHECK(t.cols == 120u);
}

TEST_CASE("every reply survives an encode and decode round trip") {
  CHECK(round_trip_reply(submit_rep{sample_job()}).job.exit_code == -3);
  round_trip_reply(ls_rep{{sample_job(), sample_job()}});
  allocation_info a{
      "a1", "j1", "box", alloc_state::finished, 1, reason::exit_code, 1, 9, 1 << 20, {}, {},
      1,    2,    3};
  a.peak_vram_bytes = 5;
  a.lanes = {"gpu0", "gpu1"};
  round_trip_reply(show_rep{sample_job(), {a}});
  round_trip_reply(logs_rep{"a1", std::string("hello\0world", 11), 11, true, false});
  round_trip_reply(cancel_rep{sample_job()});
  round_trip_reply(node_invite_rep{"cqi_x", 99});
  node_info n{"box",   "approved", false, "by ann: disk", true, false, 1 << 30,
              1 << 29, 8,          1,     1700000000000};
  round_trip_reply(node_rep{n});
  round_trip_reply(node_ls_rep{{n}});
  round_trip_reply(node_join_rep{"cq_x"});
  round_trip_reply(heartbeat_rep{true});
  round_trip_reply(report_rep{5});
  round_trip_reply(log_chunk{"data", 4, false});
  round_trip_reply(empty_rep{});
  round_trip_reply(preempt_rep{sample_job()});
  auto ev = round_trip_reply(events_rep{{{7, "j1", 2, "placed", 1700000000000, "node box"}}, 7});
  CHECK(ev.events.at(0).kind == "placed");
}

TEST_CASE("an error reply carries its stable code and message") {
  auto bytes = encode_error(3, errc::not_found, "job: no job 'x'");
  std::uint64_t seen = 0;
  auto f = decode_frame(bytes, seen);
  REQUIRE(f);
  CHECK(f->is_reply);
  CHECK_FALSE(f->ok);
  CHECK(f->error.code == errc::not_found);
  CHECK(f->error.message == "job: no job 'x'");
  CHECK(exit_code(errc::not_found) == 3);
  CHECK(exit_code(errc::permission_denied) == 4);
  CHECK(exit_code(errc::invalid_argument) == 2);
  CHECK(exit_code(errc::unavailable) == 1);
  CHECK(exit_code(errc::job_conflict) == 5);
}

TEST_CASE("a truncated frame is refused as malformed") {
  auto bytes = encode_request(1, "t", submit_req{{"n", {"true"}, "/", {}, {}, {}}});
  for (std::size_t cut : {std::size_t{1}, bytes.size() / 2, bytes.size() - 1}) {
    auto e = refused(bytes.substr(0, cut));
    CHECK(e.code == errc::malformed);
  }
  CHECK(refused("").code == errc::malformed);
}

TEST_CASE("a frame with the reserved byte 0xc1 is refused as malformed") {
  CHECK(refused(std::string("\xc1", 1)).code == errc::malformed);
  auto e = refused(pack_envelope([](auto& pk) { pk.pack_map(0); }) + std::string("\xc1", 1));
  CHECK(e.code == errc::malformed);
}

TEST_CASE("an array header claiming 2^27 elements is refused without allocating") {
  auto before = max_rss_kb();
  // 0xdd = array32 with 0x08000000 (2^27) elements, and nothing after it.
  std::string bomb("\xdd\x08\x00\x00\x00", 5);
  auto e = refused(bomb);
  CHECK((e.code == errc::too_large || e.code == errc::malformed));
  // Also inside an otherwise valid envelope.
  auto e2 = refused(pack_envelope([](auto& pk) { pk.pack_array(1u << 27); }));
  CHECK((e2.code == errc::too_large || e2.code == errc::malformed));
  CHECK(max_rss_kb() - before < 32 * 1024);
}

TEST_CASE("deeply nested input is refused") {
  std::string deep(200, '\x91'); // 200 nested one-element arrays
  deep += '\xc0';
  CHECK(refused(deep).code == errc::malformed);
}

TEST_CASE("a field of the wrong type is refused with its name") {
  auto e = refused(pack_envelope([](auto& pk) {
    pk.pack_map(1);
    pk.pack(std::string("spec"));
    pk.pack_map(4);
    pk.pack(std::string("name")), pk.pack(std::string("x"));
    pk.pack(std::string("argv")), pk.pack(17);
    pk.pack(std::string("cwd")), pk.pack(std::string("/"));
    pk.pack(std::string("env")), pk.pack_map(0);
  }));
  CHECK(e.code == errc::malformed);
  CHECK(e.message.find("spec.argv") != std::string::npos);
}

TEST_CASE("a negative number where a size is expected is refused with its name") {
  auto e = refused(pack_envelope([](auto& pk) {
    pk.pack_map(1);
    pk.pack(std::string("spec"));
    pk.pack_map(5);
    pk.pack(std::string("name")), pk.pack(std::string("x"));
    pk.pack(std::string("argv")), pk.pack_array(1), pk.pack(std::string("true"));
    pk.pack(std::string("cwd")), pk.pack(std::string("/"));
    pk.pack(std::string("env")), pk.pack_map(0);
    pk.pack(std::string("ram_bytes")), pk.pack(-5);
  }));
  CHECK(e.message.find("spec.ram_bytes") != std::string::npos);
}

TEST_CASE("unknown fields, missing fields and unknown ops are refused") {
  auto unknown = refused(pack_envelope(
      [](auto& pk) {
        pk.pack_map(2);
        pk.pack(std::string("job")), pk.pack(std::string("x"));
        pk.pack(std::string("jbo")), pk.pack(std::string("y"));
      },
      "show"));
  CHECK(unknown.message.find("jbo") != std::string::npos);
  auto missing = refused(pack_envelope([](auto& pk) { pk.pack_map(0); }, "show"));
  CHECK(missing.message.find("job") != std::string::npos);
  auto op = refused(pack_envelope([](auto& pk) { pk.pack_map(0); }, "rm_rf"));
  CHECK(op.code == errc::unknown_op);
}

TEST_CASE("a struct's keys decode in any order, a left-out optional stays absent, and a key "
          "repeated after the in-order ones is refused") {
  auto decode = [](const std::string& bytes) {
    std::uint64_t seen = 0;
    auto f = decode_frame(bytes, seen);
    REQUIRE(f);
    return decode_coordinator_request(*f);
  };
  // Reversed order (fields() order is job, offset, max_bytes, allocation).
  auto r = decode(pack_envelope(
      [](auto& pk) {
        pk.pack_map(3);
        pk.pack(std::string("max_bytes")), pk.pack(100);
        pk.pack(std::string("offset")), pk.pack(10);
        pk.pack(std::string("job")), pk.pack(std::string("j1"));
      },
      "logs"));
  REQUIRE(r);
  auto& l = std::get<logs_req>(*r);
  CHECK(l.job == "j1");
  CHECK(l.offset == 10u);
  CHECK(l.max_bytes == 100u);
  CHECK_FALSE(l.allocation);
  // In order, then one again: the repeat is named.
  auto e = refused(pack_envelope(
      [](auto& pk) {
        pk.pack_map(4);
        pk.pack(std::string("job")), pk.pack(std::string("j1"));
        pk.pack(std::string("offset")), pk.pack(10);
        pk.pack(std::string("max_bytes")), pk.pack(100);
        pk.pack(std::string("job")), pk.pack(std::string("j2"));
      },
      "logs"));
  CHECK(e.message == "job: duplicate key");
}

TEST_CASE("an environment decodes whatever the order of its keys, a repeated key keeping its "
          "first value") {
  auto pack = [](std::initializer_list<std::pair<const char*, const char*>> kv) {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    pk.pack_map(static_cast<std::uint32_t>(kv.size()));
    for (auto& [k, v] : kv)
      pk.pack(std::string(k)), pk.pack(std::string(v));
    return std::string(b.data(), b.size());
  };
  env_map want{{"A", "1"}, {"B", "2"}, {"C", "3"}};
  auto sorted = decode_env(pack({{"A", "1"}, {"B", "2"}, {"C", "3"}}));
  REQUIRE(sorted);
  CHECK(*sorted == want);
  auto shuffled = decode_env(pack({{"C", "3"}, {"A", "1"}, {"B", "2"}}));
  REQUIRE(shuffled);
  CHECK(*shuffled == want);
  auto repeated = decode_env(pack({{"A", "1"}, {"B", "2"}, {"C", "3"}, {"B", "9"}, {"A", "8"}}));
  REQUIRE(repeated);
  CHECK(*repeated == want);
  CHECK(encode_env(*shuffled) == encode_env(want)); // one digest for equal content
}

TEST_CASE("a frame over the size limit is refused before parsing") {
  std::string big(limits::frame_bytes + 1, '\xc0');
  CHECK(refused(big).code == errc::too_large);
}

TEST_CASE("a wrong protocol version is refused") {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(5);
  pk.pack(std::string("v")), pk.pack(99);
  pk.pack(std::string("id")), pk.pack(9);
  pk.pack(std::string("op")), pk.pack(std::string("ls"));
  pk.pack(std::string("token")), pk.pack(std::string("t"));
  pk.pack(std::string("body")), pk.pack_map(0);
  auto e = refused(std::string(buf.data(), buf.size()));
  CHECK(e.code == errc::unsupported_version);
}

TEST_CASE("ten thousand mutated frames are refused or decoded, never crash or throw") {
  // Seeded mutations of valid frames of every request type: flipped bytes,
  // truncations, duplications. decode_frame and the op decoder must return.
  std::vector<std::string> seeds;
  seeds.push_back(encode_request(
      1, "t", submit_req{{"n", {"sh", "-c", "x"}, "/", {{"A", "1"}}, 5, std::string("box")}}));
  seeds.push_back(encode_request(2, "t", logs_req{"job", 10, 100, std::string("a")}));
  seeds.push_back(encode_request(3, "t", move_req{"j", "before", std::string("k"), {}}));
  seeds.push_back(encode_request(4, "t", heartbeat_req{1, 2, 3, {"a"}}));
  seeds.push_back(
      encode_request(5, "t", report_req{1, "exited", "a", "j", 0, {}, reason::none, 1, {}, 2, 3}));
  std::uint64_t x = 0x9e3779b97f4a7c15ull; // xorshift, fixed seed: reproducible
  auto next = [&] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  std::size_t decoded = 0, refused_count = 0;
  for (int i = 0; i < 10000; ++i) {
    auto s = seeds[next() % seeds.size()];
    auto edits = 1 + next() % 4;
    for (std::uint64_t e = 0; e < edits && !s.empty(); ++e) {
      auto pos = next() % s.size();
      switch (next() % 4) {
      case 0:
        s[pos] = static_cast<char>(next());
        break;
      case 1:
        s.resize(pos);
        break;
      case 2:
        s.insert(pos, s.substr(pos, next() % 16));
        break;
      default:
        s[pos] = static_cast<char>(s[pos] ^ (1 << (next() % 8)));
        break;
      }
    }
    std::uint64_t seen = 0;
    auto f = decode_frame(s, seen);
    if (!f) {
      ++refused_count;
      continue;
    }
    auto r = decode_coordinator_request(*f);
    (r ? decoded : refused_count)++;
  }
  CHECK(decoded + refused_count == 10000);
  CHECK(refused_count > 0);
}

TEST_CASE("a stored record keeps only what differs from the defaults, and reads back whole") {
  job_info j;
  j.id = "j1", j.name = "train", j.owner = "ana", j.state = job_state::failed;
  j.argv = {"python", "train.py"}, j.exit_code = 0, j.priority = "low";
  j.preempt = "never", j.gpus = 2, j.array_index = 0;
  const std::string_view skip[] = {"argv"};
  auto bytes = encode_record(j, skip);
  auto back = decode_record<job_info>(bytes);
  REQUIRE(back);
  CHECK(back->argv.empty()); // left out: kept in a column of its own
  back->argv = j.argv;
  CHECK(encode_record(*back) == encode_record(j)); // every field read back
  CHECK(back->exit_code == 0);
  CHECK(back->array_index == 0u);
  CHECK(back->priority == "low");
  // A default job is an empty map; "preempt" equals its default and is left out.
  CHECK(encode_record(job_info{}) == std::string("\x80", 1));
  CHECK(bytes.find("preempt") == std::string::npos);
  CHECK(bytes.find("exit_code") != std::string::npos); // set, although to 0
  // A field added later (absent from an older record) reads as its default.
  auto older = decode_record<job_info>(std::string("\x81\xa2id\xa1x", 6));
  REQUIRE(older);
  CHECK(older->id == "x");
  CHECK(older->priority == "medium");
  // Damage is named; an unknown field is refused.
  auto unknown = decode_record<job_info>(std::string("\x81\xa3zzz\x01", 6));
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message == "record.zzz: unknown field");
  CHECK_FALSE(decode_record<job_info>(std::string("\x81\xa2id", 4)));
}

TEST_CASE("a decoded frame does not depend on the caller's bytes") {
  bus::submit_req r;
  r.spec.name = "train";
  r.spec.argv = {"python3", "train.py"};
  r.spec.env = {{"HOME", "/home/me"}};
  auto encoded = encode_request(9, "cq_token", r);
  SECTION("the copying form: the caller's buffer may change after the decode") {
    auto bytes = encoded;
    std::uint64_t seen = 0;
    auto f = decode_frame(bytes, seen);
    REQUIRE(f);
    std::fill(bytes.begin(), bytes.end(), '\0');
    bytes.clear();
    bytes.shrink_to_fit();
    auto back = decode_body<bus::submit_req>(*f);
    REQUIRE(back);
    CHECK(back->spec.name == "train");
    CHECK(back->spec.argv == bus::string_list{"python3", "train.py"});
    CHECK(encode_request(9, "cq_token", *back) == encoded);
  }
  SECTION("the owning form: the frame keeps its owner's bytes alive") {
    auto owner = std::make_shared<std::string>(encoded);
    std::uint64_t seen = 0;
    auto f = decode_frame(*owner, owner, seen);
    REQUIRE(f);
    std::weak_ptr<std::string> watch = owner;
    owner.reset();
    CHECK_FALSE(watch.expired()); // the frame holds it
    auto back = decode_body<bus::submit_req>(*f);
    REQUIRE(back);
    CHECK(encode_request(9, "cq_token", *back) == encoded);
    f = bus::error_info{}; // the frame goes: so does the owner
    CHECK(watch.expired());
  }
}
