// The coordinator's local socket (local_wire.hpp, docs/adr/0047): the gateway
// serves length-prefixed frames on a Unix socket beside its ZeroMQ one, the
// client speaks it without ZeroMQ, pipelined or not, and falls back to
// ZeroMQ on an older coordinator's socket. Hostile bytes end only their own
// connection.
#include "cq/bus/client.hpp"
#include "cq/bus/gateway.hpp"
#include "cq/bus/local_wire.hpp"
#include "unit/scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>

using namespace cq;
using namespace cq::bus;

namespace {

/// A gateway that answers every whoami with the request's own id in `name`.
struct echo_server {
  std::unique_ptr<gateway> gw;
  std::atomic<int> requests{0};
  explicit echo_server(const std::string& endpoint, const std::string& local = "") {
    gateway::handlers h;
    h.on_request = [this](const peer_id& peer, const std::string&, const std::string&,
                          const frame& f, coordinator_request) {
      ++requests;
      gw->send(peer, encode_reply(f.id, whoami_rep{std::to_string(f.id), "owner"}));
    };
    gw = std::make_unique<gateway>(endpoint, std::move(h));
    if (!local.empty())
      gw->bind_local(local);
    gw->start();
  }
};

int raw_connect(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

/// Whether the server closed `fd` within a few seconds (read returns 0).
bool closed_by_server(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 5000) <= 0)
    return false;
  char c;
  return ::read(fd, &c, 1) == 0;
}

} // namespace

TEST_CASE("the local socket serves requests without ZeroMQ, one at a time or pipelined") {
  test::temp_dir dir("cq-local-wire");
  auto sock = (dir.path / "cq.sock").string();
  echo_server server("tcp://127.0.0.1:0", sock);
  struct stat st {};
  REQUIRE(::stat(sock.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0666);

  client c(std::string(local_wire::scheme) + sock, "t", std::chrono::milliseconds(5000));
  REQUIRE(c.connected());
  auto one = c.call<whoami_rep>(whoami_req{});
  REQUIRE(one);
  CHECK(one->name == "1");
  // A thousand in flight, 64 at a time: each reply matched to its request.
  std::vector<whoami_req> many(1000);
  auto reps = c.call_all<whoami_rep>(many, 64);
  REQUIRE(reps.size() == 1000);
  for (std::size_t i = 0; i < reps.size(); ++i) {
    REQUIRE(reps[i]);
    CHECK(reps[i]->name == std::to_string(i + 2));
  }
  CHECK(server.requests == 1001);

  // A second client beside the first, on a connection of its own.
  client other(std::string(local_wire::scheme) + sock, "t", std::chrono::milliseconds(5000));
  CHECK(other.call<whoami_rep>(whoami_req{}));
  CHECK(c.call<whoami_rep>(whoami_req{}));
}

TEST_CASE("hostile bytes on the local socket end only their own connection") {
  test::temp_dir dir("cq-local-wire");
  auto sock = (dir.path / "cq.sock").string();
  echo_server server("tcp://127.0.0.1:0", sock);

  // A length above the frame limit.
  int big = raw_connect(sock);
  const unsigned char huge[] = {0x7f, 0xff, 0xff, 0xff, 'x'};
  REQUIRE(::write(big, huge, sizeof huge) == sizeof huge);
  CHECK(closed_by_server(big));
  ::close(big);
  // A length of zero.
  int zero = raw_connect(sock);
  const unsigned char none[] = {0, 0, 0, 0};
  REQUIRE(::write(zero, none, sizeof none) == sizeof none);
  CHECK(closed_by_server(zero));
  ::close(zero);
  // A ZeroMQ client's greeting.
  int zmtp = raw_connect(sock);
  const unsigned char greeting[] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f};
  REQUIRE(::write(zmtp, greeting, sizeof greeting) == sizeof greeting);
  CHECK(closed_by_server(zmtp));
  ::close(zmtp);
  // A well framed body that is not a frame: an error reply, the connection stays.
  int junk = raw_connect(sock);
  auto bad = local_wire::framed("not msgpack at all");
  REQUIRE(::write(junk, bad.data(), bad.size()) == static_cast<ssize_t>(bad.size()));
  pollfd p{junk, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 5000) == 1);
  char buf[4096];
  auto n = ::read(junk, buf, sizeof buf);
  REQUIRE(n > static_cast<ssize_t>(local_wire::header_bytes));
  std::uint64_t seen = 0;
  auto f = decode_frame(std::string_view(buf + local_wire::header_bytes,
                                         static_cast<std::size_t>(n) - local_wire::header_bytes),
                        seen);
  REQUIRE(f);
  CHECK(f->is_reply);
  CHECK_FALSE(f->ok);
  // Half a frame, then gone.
  int half = raw_connect(sock);
  REQUIRE(::write(half, bad.data(), 6) == 6);
  ::close(half);
  ::close(junk);

  client c(std::string(local_wire::scheme) + sock, "t", std::chrono::milliseconds(5000));
  CHECK(c.call<whoami_rep>(whoami_req{}));
  CHECK(server.requests == 1);
}

TEST_CASE("a client falls back to ZeroMQ on an older coordinator's socket, and says when nothing "
          "listens") {
  test::temp_dir dir("cq-local-wire");
  auto sock = (dir.path / "old.sock").string();
  {
    // An older coordinator served ZeroMQ (ipc://) at the path <config>/local names.
    echo_server old("ipc://" + sock);
    client c(std::string(local_wire::scheme) + sock, "t", std::chrono::milliseconds(5000));
    REQUIRE(c.connected());
    auto r = c.call<whoami_rep>(whoami_req{});
    REQUIRE(r);
    CHECK(old.requests == 1); // the local framing it could not read applied nothing
    CHECK(c.call<whoami_rep>(whoami_req{}));
  }
  // A path nothing listens on: not connected, and why.
  auto gone = (dir.path / "gone.sock").string();
  client c(std::string(local_wire::scheme) + gone, "t", std::chrono::milliseconds(500));
  CHECK_FALSE(c.connected());
  auto r = c.call<whoami_rep>(whoami_req{});
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::unavailable);
  CHECK(r.error().message.find(gone) != std::string::npos);
}

TEST_CASE("the local socket's file goes with its gateway, and a file that is not a socket is "
          "never replaced") {
  test::temp_dir dir("cq-local-wire");
  auto sock = (dir.path / "cq.sock").string();
  {
    echo_server server("tcp://127.0.0.1:0", sock);
    CHECK(std::filesystem::exists(sock));
  }
  CHECK_FALSE(std::filesystem::exists(sock));
  auto file = (dir.path / "precious").string();
  std::ofstream(file) << "keep";
  CHECK_THROWS(echo_server("tcp://127.0.0.1:0", file));
  CHECK(test::read_text(file) == "keep");
}
