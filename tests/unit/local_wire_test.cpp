// The coordinator's local socket (local_wire.hpp, docs/adr/0047): the gateway
// serves length-prefixed frames on a Unix socket beside its ZeroMQ one, the
// client speaks it without ZeroMQ, pipelined or not, and falls back to
// ZeroMQ on an older coordinator's socket. Hostile bytes end only their own
// connection.
#include "bus/src/local_server.hpp"
#include "cq/bus/client.hpp"
#include "cq/bus/gateway.hpp"
#include "cq/bus/local_wire.hpp"
#include "unit/scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <zmq.hpp>

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

/// A gateway whose requests are answered by a thread of its own, as the
/// coordinator's actors answer them: each whoami gets its id back, with
/// `pad` bytes more in the name.
struct worker_server {
  std::unique_ptr<gateway> gw;
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::pair<peer_id, std::uint64_t>> todo;
  bool hold = false; ///< answer nothing until released
  bool stop = false;
  std::size_t pad = 0;
  std::thread worker;
  explicit worker_server(const std::string& local) {
    gateway::handlers h;
    h.on_request = [this](const peer_id& peer, const std::string&, const std::string&,
                          const frame& f, coordinator_request) {
      std::lock_guard g(m);
      todo.emplace_back(peer, f.id);
      cv.notify_one();
    };
    gw = std::make_unique<gateway>("tcp://127.0.0.1:0", std::move(h));
    gw->bind_local(local);
    // Woken only by what it is told: a wake-up the code misses shows as a
    // missed deadline, not as half a second.
    gw->set_max_poll(std::chrono::minutes(1));
    gw->start();
    worker = std::thread([this] {
      std::unique_lock lock(m);
      for (;;) {
        cv.wait(lock, [&] { return stop || (!hold && !todo.empty()); });
        if (stop)
          return;
        auto [peer, id] = todo.front();
        todo.pop_front();
        auto name = std::to_string(id) + std::string(pad, 'x');
        lock.unlock();
        gw->send(peer, encode_reply(id, whoami_rep{name, "owner"}));
        lock.lock();
      }
    });
  }
  void release() {
    std::lock_guard g(m);
    hold = false;
    cv.notify_one();
  }
  std::size_t waiting() {
    std::lock_guard g(m);
    return todo.size();
  }
  ~worker_server() {
    {
      std::lock_guard g(m);
      stop = true;
      cv.notify_one();
    }
    worker.join();
    gw.reset(); // its thread may still call on_request, which uses the members above
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

/// What the server wrote to `fd` before it closed it (nullopt when it did
/// not close it within a few seconds).
std::optional<std::string> said_before_close(int fd) {
  std::string got;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0)
      return std::nullopt;
    char buf[4096];
    auto n = ::read(fd, buf, sizeof buf);
    if (n <= 0)
      return got;
    got.append(buf, static_cast<std::size_t>(n));
  }
}

/// The error code of the one framed error reply in `bytes`.
std::optional<errc> error_in(const std::string& bytes) {
  if (bytes.size() <= local_wire::header_bytes)
    return std::nullopt;
  std::uint64_t seen = 0;
  auto f = decode_frame(std::string_view(bytes).substr(local_wire::header_bytes), seen);
  if (!f || !f->is_reply || f->ok)
    return std::nullopt;
  return f->error.code;
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

  // A length above the frame limit: said, then closed.
  int big = raw_connect(sock);
  const unsigned char huge[] = {0x7f, 0xff, 0xff, 0xff, 'x'};
  REQUIRE(::write(big, huge, sizeof huge) == sizeof huge);
  auto said = said_before_close(big);
  REQUIRE(said);
  CHECK(error_in(*said) == errc::malformed);
  ::close(big);
  // A length of zero.
  int zero = raw_connect(sock);
  const unsigned char none[] = {0, 0, 0, 0};
  REQUIRE(::write(zero, none, sizeof none) == sizeof none);
  said = said_before_close(zero);
  REQUIRE(said);
  CHECK(error_in(*said) == errc::malformed);
  ::close(zero);
  // A ZeroMQ client's greeting: closed (it could not read a frame).
  int zmtp = raw_connect(sock);
  const unsigned char greeting[] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f};
  REQUIRE(::write(zmtp, greeting, sizeof greeting) == sizeof greeting);
  CHECK(said_before_close(zmtp) == std::string());
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

TEST_CASE("a ZeroMQ peer cannot take a local connection's routing id, and a full socket says so") {
  test::temp_dir dir("cq-local-wire");
  auto sock = (dir.path / "cq.sock").string();
  echo_server server("tcp://127.0.0.1:0", sock);
  client local(std::string(local_wire::scheme) + sock, "t", std::chrono::milliseconds(5000));
  REQUIRE(local.call<whoami_rep>(whoami_req{})); // local connection 0

  // A DEALER that names itself as local connection 0 would get its replies
  // there: it is answered with an error on ZeroMQ, and nothing reaches L0.
  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::routing_id, std::string("\x01"
                                                   "0",
                                                   2));
  dealer.connect(server.gw->endpoint());
  auto req = encode_request(1, "t", whoami_req{});
  dealer.send(zmq::buffer(req), zmq::send_flags::none);
  zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0}};
  REQUIRE(zmq::poll(items, 1, std::chrono::milliseconds(5000)) == 1);
  zmq::message_t msg;
  REQUIRE(dealer.recv(msg, zmq::recv_flags::none));
  std::uint64_t seen = 0;
  auto f = decode_frame(msg.to_string_view(), seen);
  REQUIRE(f);
  CHECK_FALSE(f->ok);
  CHECK(f->error.code == errc::malformed);
  CHECK(server.requests == 1);
  auto again = local.call<whoami_rep>(whoami_req{});
  REQUIRE(again);
  CHECK(again->name == "2"); // its own reply, nothing injected before it

  // Past max_connections, a new connection is told why, then closed. Both
  // ends live in this process: it needs twice that many descriptors.
  constexpr auto most = local_server::max_connections;
  rlimit rl{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &rl) == 0);
  if (rl.rlim_cur < 2 * most + 64 && rl.rlim_max >= 2 * most + 64) {
    rl.rlim_cur = 2 * most + 64;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &rl) == 0);
  }
  if (rl.rlim_cur < 2 * most + 64) {
    WARN("RLIMIT_NOFILE too low to fill the local socket; that part not checked");
    return;
  }
  std::vector<int> held;
  for (std::size_t i = 0; i + 1 < most; ++i) // the one `local` holds is the last
    held.push_back(raw_connect(sock));
  int one_more = raw_connect(sock);
  auto said = said_before_close(one_more);
  REQUIRE(said);
  CHECK(error_in(*said) == errc::unavailable);
  ::close(one_more);
  for (int fd : held)
    ::close(fd);
}

TEST_CASE("replies written by another thread reach local peers whole, in order, and let the "
          "gateway read and close what it must") {
  test::temp_dir dir("cq-local-wire");
  auto sock = (dir.path / "cq.sock").string();
  worker_server server(sock);
  auto url = std::string(local_wire::scheme) + sock;

  SECTION("pipelined past the in-flight bound: reading resumes as replies go out") {
    client c(url, "t", std::chrono::milliseconds(10000));
    REQUIRE(c.connected());
    std::vector<whoami_req> many(local_server::max_in_flight * 3);
    auto reps = c.call_all<whoami_rep>(many, many.size());
    REQUIRE(reps.size() == many.size());
    for (std::size_t i = 0; i < reps.size(); ++i) {
      REQUIRE(reps[i]);
      CHECK(reps[i]->name == std::to_string(i + 1));
    }
  }

  SECTION("a reply larger than the socket takes at once is finished by the gateway") {
    server.pad = 3 << 20; // far more than a Unix socket buffers
    client c(url, "t", std::chrono::milliseconds(10000));
    auto rep = c.call<whoami_rep>(whoami_req{});
    INFO((rep ? std::string() : rep.error().message));
    REQUIRE(rep);
    CHECK(rep->name.size() == std::to_string(1).size() + server.pad);
  }

  SECTION("a peer that ended its side before the reply gets it, then the connection closes") {
    {
      std::lock_guard g(server.m);
      server.hold = true;
    }
    int fd = raw_connect(sock);
    auto req = local_wire::framed(encode_request(7, "t", whoami_req{}));
    REQUIRE(::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size()));
    REQUIRE(::shutdown(fd, SHUT_WR) == 0);
    // The request is taken (a deadline, not a time), then the gateway most
    // likely reads the end before the reply is made: the pause only makes
    // that order likely, and what follows holds in either order.
    for (int i = 0; i < 500 && server.waiting() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(server.waiting() == 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    server.release();
    // Answered, then closed well before the idle bound (said_before_close
    // waits 5 s for each read).
    auto got = said_before_close(fd);
    ::close(fd);
    REQUIRE(got);
    REQUIRE(got->size() > local_wire::header_bytes);
    std::uint64_t seen = 0;
    auto f = decode_frame(std::string_view(*got).substr(local_wire::header_bytes), seen);
    REQUIRE(f);
    CHECK(f->id == 7);
    CHECK(f->ok);
  }
}
