// Unit tests of the CLI's token file rules (cq/cli/config.hpp): which files
// read_token() refuses, with which code and message, and that it never blocks.
#include "cq/cli/config.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

using Catch::Matchers::Contains;
using cq::errc;
using cq::cli::read_token;

namespace {

namespace fs = std::filesystem;

/// A config dir of its own under $TMPDIR, removed at the end of the test.
struct temp_config_dir {
  temp_config_dir() {
    auto base = fs::temp_directory_path() / "cq-cli-config-XXXXXX";
    std::string templ = base.string();
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    dir = templ;
  }
  ~temp_config_dir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string token() const { return (dir / "token").string(); }

  /// Writes `content` to the token file and gives it `mode` (not the umask's).
  void write_token(const std::string& content, mode_t mode) const {
    {
      std::ofstream out(token(), std::ios::binary | std::ios::trunc);
      out << content;
    }
    REQUIRE(::chmod(token().c_str(), mode) == 0);
  }

  fs::path dir;
};

} // namespace

TEST_CASE("a token file readable by others is refused and names the fix") {
  temp_config_dir d;
  d.write_token("secret-token\n", 0644);
  auto t = read_token(d.dir.string());
  REQUIRE_FALSE(t);
  CHECK(t.error().code == errc::permission_denied);
  CHECK_THAT(t.error().message, Contains(d.token()));
  CHECK_THAT(t.error().message, Contains("chmod 600 " + d.token()));
  CHECK_THAT(t.error().message, Contains("0644"));
}

TEST_CASE("a token file that grants group or others any permission is refused") {
  temp_config_dir d;
  for (mode_t mode : {0640, 0620, 0610, 0604, 0602, 0601, 0660, 0666}) {
    CAPTURE(mode);
    d.write_token("secret-token\n", mode);
    auto t = read_token(d.dir.string());
    REQUIRE_FALSE(t);
    CHECK(t.error().code == errc::permission_denied);
    CHECK_THAT(t.error().message, Contains("chmod 600"));
  }
}

TEST_CASE("a token file only its owner can read is accepted and its first line trimmed") {
  temp_config_dir d;
  d.write_token("  secret-token \r\nsecond line\n", 0600);
  auto t = read_token(d.dir.string());
  REQUIRE(t);
  CHECK(*t == "secret-token");
  d.write_token("read-only-token", 0400);
  t = read_token(d.dir.string());
  REQUIRE(t);
  CHECK(*t == "read-only-token");
}

TEST_CASE("a token path that is a FIFO is refused at once instead of blocking") {
  temp_config_dir d;
  REQUIRE(::mkfifo(d.token().c_str(), 0600) == 0);
  auto pending = std::async(std::launch::async, [&] { return read_token(d.dir.string()); });
  bool finished = pending.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!finished) {
    // The read blocks in open(): become the FIFO's writer and close it, so
    // that the reader gets end-of-file and this test fails instead of hanging.
    int w = ::open(d.token().c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0)
      ::close(w);
  }
  auto t = pending.get();
  CHECK(finished);
  REQUIRE_FALSE(t);
  CHECK(t.error().code == errc::permission_denied);
  CHECK_THAT(t.error().message, Contains(d.token()));
  CHECK_THAT(t.error().message, Contains("FIFO"));
  CHECK_THAT(t.error().message, Contains("not a token file"));
}

TEST_CASE("a token path that is a directory is refused as a directory") {
  temp_config_dir d;
  REQUIRE(::mkdir(d.token().c_str(), 0700) == 0);
  auto t = read_token(d.dir.string());
  REQUIRE_FALSE(t);
  CHECK(t.error().code == errc::permission_denied);
  CHECK_THAT(t.error().message, Contains(d.token() + " is a directory, not a token file"));
}

TEST_CASE("a token path that is a socket is refused as a socket") {
  temp_config_dir d;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (d.token().size() >= sizeof(addr.sun_path))
    return; // $TMPDIR too deep for a socket path: nothing to check here
  std::strcpy(addr.sun_path, d.token().c_str());
  int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  auto t = read_token(d.dir.string());
  ::close(s);
  REQUIRE_FALSE(t);
  CHECK(t.error().code == errc::permission_denied);
  CHECK_THAT(t.error().message, Contains("is a socket, not a token file"));
}

TEST_CASE("a token path that is a character device is refused as a device") {
  temp_config_dir d;
  fs::create_symlink("/dev/null", d.token());
  auto t = read_token(d.dir.string());
  REQUIRE_FALSE(t);
  CHECK(t.error().code == errc::permission_denied);
  CHECK_THAT(t.error().message, Contains("is a character device, not a token file"));
}

TEST_CASE("a missing token file is unauthenticated and says how to get one") {
  temp_config_dir d;
  auto t = read_token(d.dir.string());
  REQUIRE_FALSE(t);
  CHECK(t.error().code == errc::unauthenticated);
  CHECK_THAT(t.error().message, Contains("no token file at " + d.token()));
  CHECK_THAT(t.error().message, Contains("cq up"));
}

TEST_CASE("an empty token file is unauthenticated and named") {
  temp_config_dir d;
  d.write_token("", 0600);
  auto t = read_token(d.dir.string());
  REQUIRE_FALSE(t);
  CHECK(t.error().code == errc::unauthenticated);
  CHECK_THAT(t.error().message, Contains("token file " + d.token() + " is empty"));
  d.write_token(" \n", 0600);
  t = read_token(d.dir.string());
  REQUIRE_FALSE(t);
  CHECK(t.error().code == errc::unauthenticated);
}

TEST_CASE("a token file whose first line does not end within 4 KiB is refused") {
  temp_config_dir d;
  d.write_token(std::string(cq::cli::max_token_file_bytes + 1, 'a'), 0600);
  auto t = read_token(d.dir.string());
  REQUIRE_FALSE(t);
  CHECK(t.error().code == errc::unauthenticated);
  CHECK_THAT(t.error().message, Contains(d.token()));
  // Exactly the limit, without a final newline, still fits.
  d.write_token(std::string(cq::cli::max_token_file_bytes, 'b'), 0600);
  t = read_token(d.dir.string());
  REQUIRE(t);
  CHECK(t->size() == cq::cli::max_token_file_bytes);
}

TEST_CASE("<config>/local names the local socket as unix:// or, as earlier versions wrote it, "
          "ipc://, and only for the endpoint it stands for") {
  temp_config_dir d;
  ::setenv("CQ_CONFIG_DIR", d.dir.c_str(), 1);
  ::unsetenv("CQ_URL");
  std::ofstream(d.dir / "url") << "tcp://127.0.0.1:7811\n";
  auto local_of = [&](const std::string& text) {
    std::ofstream(d.dir / "local", std::ios::trunc) << text;
    auto cfg = cq::cli::load_config();
    REQUIRE(cfg);
    return cfg->local_endpoint;
  };
  CHECK(local_of("unix:///run/cq.sock\ntcp://127.0.0.1:7811\n") == "unix:///run/cq.sock");
  CHECK(local_of("ipc:///run/cq.sock\ntcp://127.0.0.1:7811\n") == "unix:///run/cq.sock");
  CHECK(local_of("unix:///run/cq.sock\ntcp://127.0.0.1:9999\n").empty());
  CHECK(local_of("unix://relative.sock\ntcp://127.0.0.1:7811\n").empty());
  CHECK(local_of("tcp://127.0.0.1:1\ntcp://127.0.0.1:7811\n").empty());
  CHECK(cq::cli::local_record("/run/cq.sock", "tcp://127.0.0.1:7811") ==
        "unix:///run/cq.sock\ntcp://127.0.0.1:7811\n");
  ::unsetenv("CQ_CONFIG_DIR");
}
