// cq run: submit, follow the job's output as it is written, exit with the
// job's exit code (srun's habit, on cq's queue). The first Ctrl-C cancels the
// job and keeps following until it ends; a second stops following (the
// cancel stands).
#include "commands.hpp"
#include "cq/cli/escape.hpp"
#include "output.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <signal.h>

#include <atomic>

namespace cq::cli {

namespace {

std::atomic<int> interrupts{0};

extern "C" void on_interrupt(int) {
  interrupts.fetch_add(1);
}

} // namespace

int run_exit_code(const bus::job_info& j) {
  using bus::reason;
  if (j.state == bus::job_state::succeeded)
    return 0;
  switch (j.reason) {
  case reason::exit_code:
    return static_cast<int>(j.exit_code.value_or(1) & 0xff);
  case reason::signal:
    return 128 + static_cast<int>(j.signal.value_or(0));
  case reason::oom:
  case reason::vram_cap:
    return 137;
  case reason::timeout:
    return 124;
  case reason::launch_failed:
  case reason::refused:
    return 125;
  case reason::cancelled:
    return 130;
  default:
    return 1;
  }
}

int run_run(const submit_options& o) {
  if (o.array || o.from)
    return report_error(
        {errc::invalid_argument,
         fmt::format("{}: cq run follows one job; cq submit {} makes an array",
                     o.array ? "--array" : "--from", o.array ? "--array" : "--from")},
        false);
  if (o.pty)
    return run_pty(o);
  auto id = submit_job(o);
  if (!id)
    return report_error(id.error(), false);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  fmt::print(stderr, "cq: job {} (Ctrl-C cancels it)\n", *id);
  auto s = open_session();
  if (!s)
    return report_error(s.error(), false);
  bool cancel_sent = false;
  auto interrupted = [&] {
    auto n = interrupts.load();
    if (n == 0)
      return false;
    if (n >= 2) {
      fmt::print(stderr, "\ncq: no longer following job {}{}\n", *id,
                 cancel_sent ? " (its cancel stands)" : "");
      return true;
    }
    if (!cancel_sent) {
      cancel_sent = true;
      std::fflush(stdout);
      auto r = s->call_retrying<bus::cancel_rep>(bus::cancel_req{*id, operation_id()});
      if (r)
        fmt::print(stderr, "\ncq: cancelling job {}; Ctrl-C again stops following it\n", *id);
      else
        fmt::print(stderr, "\ncq: cannot cancel job {}: {}\n", *id,
                   escape_control(r.error().message));
    }
    return false;
  };
  logs_options lo;
  lo.job = *id;
  lo.follow = true;
  if (int rc = follow_logs(*s, lo, interrupted); rc != 0)
    return rc;
  auto rep = s->call<bus::show_rep>(bus::show_req{*id});
  if (!rep)
    return report_error(rep.error(), false);
  auto code = run_exit_code(rep->job);
  if (rep->job.state != bus::job_state::succeeded)
    fmt::print(
        stderr, "cq: job {} {}{} (exit {})\n", *id, to_string(rep->job.state),
        rep->job.reason == bus::reason::none ? "" : fmt::format(": {}", to_string(rep->job.reason)),
        code);
  return code;
}

} // namespace cq::cli
