#pragma once
// A blocking request/reply client: over one ZeroMQ DEALER socket, or over the
// coordinator's local socket (`unix://PATH`, local_wire.hpp) without ZeroMQ.
// Used by `cq` and by tests; no CAF. A reply that does not arrive within the
// timeout is errc::unavailable (retryable, exit code 1).

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
  /// `unix://PATH` connects at once to a local socket (`curve` is used only
  /// should the socket turn out to be an older coordinator's ZeroMQ one).
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

  /// Sends every request of `reqs`, at most `window` of them unanswered at a
  /// time, and returns the replies in the order of `reqs`. The coordinator
  /// commits what arrives together in one transaction, so a thousand cancels
  /// cost a few commits, not a thousand. A reply that does not come within
  /// the timeout after the last one is `unavailable`, as with call().
  template <class Rep, class Req>
  std::vector<result<Rep>> call_all(const std::vector<Req>& reqs, std::size_t window = 64) {
    std::vector<std::string> bytes;
    std::vector<std::uint64_t> ids;
    bytes.reserve(reqs.size());
    ids.reserve(reqs.size());
    for (const auto& r : reqs) {
      ids.push_back(next_id_);
      bytes.push_back(encode_request(next_id_++, token_, r));
    }
    std::vector<result<Rep>> out;
    out.reserve(reqs.size());
    for (auto& f : round_trips(bytes, ids, window)) {
      if (!f)
        out.push_back(f.error());
      else if (!f->ok)
        out.push_back(f->error);
      else
        out.push_back(decode_body<Rep>(*f));
    }
    return out;
  }

  /// Sends raw bytes and waits for the reply frame (tests use it for hostile frames).
  result<frame> round_trip(const std::string& bytes);
  /// False when a `unix://` endpoint refused the connection (nothing
  /// listens there: a socket file left by a killed coordinator); why.
  bool connected() const;
  std::string connect_error() const;
  /// call_all's transport: `bytes[i]` is the request with id `ids[i]`.
  std::vector<result<frame>> round_trips(const std::vector<std::string>& bytes,
                                         const std::vector<std::uint64_t>& ids, std::size_t window);

private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::string token_;
  std::uint64_t next_id_ = 1;
};

} // namespace cq::bus
