#pragma once
// cq-bench's real cq-coordinator: a process on a fresh state dir with an
// owner, serving on a random loopback port (and its Unix socket), killed and
// its state dir removed when it goes (CQ_BENCH_KEEP=1 keeps the dir).

#include "cq/bus/curve.hpp"

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>

namespace cq::bench {

/// The directory of the running cq-bench, where cq and cq-coordinator are.
std::string self_dir();

/// A coordinator with an owner, serving on a random loopback port.
struct coordinator {
  std::filesystem::path dir;
  std::string endpoint;
  std::string token;
  pid_t pid = -1;
  std::optional<bus::client_curve> curve; ///< clients speak CurveZMQ (--curve)
  std::uint64_t cleanup = 0;              ///< removes `dir` if a signal stops cq-bench

  explicit coordinator(bool with_curve = false);
  coordinator(const coordinator&) = delete;
  coordinator& operator=(const coordinator&) = delete;
  ~coordinator();

  /// The Unix socket it also serves, as under `cq up`.
  std::string local_socket() const { return (dir / "cq.sock").string(); }

  /// Starts the serving process on the state dir; returns the milliseconds
  /// until it answered a request.
  double spawn();

  void kill9();
};

} // namespace cq::bench
