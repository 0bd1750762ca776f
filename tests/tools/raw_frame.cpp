// cq-test-raw ENDPOINT HEX: sends the bytes HEX as one frame to a coordinator
// and prints the reply's outcome ("ok" or "error <code>"). For tests of
// hostile input; exits 1 when no reply came.
#include "cq/bus/client.hpp"

#include <fmt/format.h>

#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    fmt::print(stderr, "usage: cq-test-raw ENDPOINT HEX\n");
    return 2;
  }
  std::string hex = argv[2], bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  cq::bus::client c(argv[1], "", std::chrono::milliseconds(3000));
  auto f = c.round_trip(bytes);
  if (!f) {
    if (f.error().code == cq::errc::unavailable) {
      fmt::print("no reply: {}\n", f.error().message);
      return 1;
    }
    fmt::print("undecodable reply: {}\n", f.error().message);
    return 1;
  }
  if (f->ok)
    fmt::print("ok\n");
  else
    fmt::print("error {}: {}\n", cq::to_string(f->error.code), f->error.message);
  return 0;
}
