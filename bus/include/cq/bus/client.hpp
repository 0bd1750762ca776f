#pragma once
// A blocking request/reply client over one ZeroMQ DEALER socket. Used by `cq`
// and by tests; no CAF. One round trip per call; a reply that does not arrive
// within the timeout is errc::unavailable (retryable, exit code 1).

#include "cq/bus/codec.hpp"
#include "cq/bus/curve.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace cq::bus {

class client {
public:
  /// Connects (lazily, as ZeroMQ does) to `endpoint`, e.g. "tcp://127.0.0.1:7800";
  /// with `curve`, encrypted, to the coordinator whose public key it names.
  client(std::string endpoint, std::string token, std::chrono::milliseconds timeout,
         std::optional<client_curve> curve = std::nullopt);
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Sends `req` and waits for its reply, decoded as Rep.
  template <class Rep, class Req>
  result<Rep> call(const Req& req) {
    auto f = round_trip(encode_request(next_id_, token_, req));
    if (!f)
      return f.error();
    if (!f->ok)
      return f->error;
    return decode_body<Rep>(*f);
  }

  /// Sends raw bytes and waits for the reply frame (tests use it for hostile frames).
  result<frame> round_trip(const std::string& bytes);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::string token_;
  std::uint64_t next_id_ = 1;
};

} // namespace cq::bus
