// cq run: submit, follow the job's output as it is written, exit with the
// job's exit code (srun's habit, on cq's queue). The first Ctrl-C cancels the
// job and keeps following until it ends; a second stops following (the
// cancel stands). SIGTERM and SIGHUP cancel it and end cq run at once.
#include "commands.hpp"
#include "cq/cli/escape.hpp"
#include "output.hpp"
#include "render_detail.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <atomic>

namespace cq::cli {

namespace {

std::atomic<int> interrupts{0};
std::atomic<int> ended_by{0}; ///< SIGTERM or SIGHUP: cq run is told to end now

/// What SIGINT, SIGTERM and SIGHUP did before an interrupt_cancels (one at
/// a time), put back when it goes.
constexpr int caught[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction before[3];

bool pipe_has_data(int fd) {
  int n = 0;
  return ::ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

extern "C" void on_interrupt(int) {
  interrupts.fetch_add(1);
}
extern "C" void on_end(int sig) {
  ended_by.store(sig);
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
  if (o.pty)
    return run_pty(o);
  std::optional<session> s; // the submit's connection, kept for the follow
  auto id = submit_job(o, &s);
  if (!id)
    return report_error(id.error(), false);
  // `echo data | cq run -- cat` printed nothing: the job runs on a node,
  // its stdin is /dev/null (srun would forward it). Said, not silently lost.
  // Only a pipe with something in it: an idle one (ssh, CI) is no sign.
  if (struct stat in{}; ::fstat(0, &in) == 0 && S_ISFIFO(in.st_mode) && pipe_has_data(0))
    fmt::print(stderr, "cq: the job's stdin is /dev/null: cq run does not pass a pipe on (give "
                       "the job a file to read, or cq run --pty for a terminal)\n");
  interrupt_cancels interrupted(*s, *id, "following");
  if (!o.quiet)
    fmt::print(stderr, "cq: job {} (Ctrl-C cancels it)\n", *id);
  logs_options lo;
  lo.job = *id;
  lo.follow = true;
  lo.quiet = o.quiet;
  if (int rc = follow_logs(*s, lo, [&] { return interrupted(); }); rc != 0)
    return interrupted.exit_code(rc);
  return report_run_end(*s, *id, false);
}

interrupt_cancels::interrupt_cancels(session& s, std::string job, std::string doing)
    : s_(s), job_(std::move(job)), doing_(std::move(doing)) {
  // Ctrl-C, and a kill or a closed terminal (srun's habit): the job is
  // cancelled, instead of left behind unsaid. SIGTERM or SIGHUP ignored
  // already stays ignored (nohup cq run ...); SIGINT is always taken, as a
  // script's background job (which ignores it) is stopped by kill -INT.
  for (int i = 0; i < 3; ++i) {
    ::sigaction(caught[i], nullptr, &before[i]);
    if (caught[i] != SIGINT && before[i].sa_handler == SIG_IGN)
      continue;
    struct sigaction sa {};
    sa.sa_handler = caught[i] == SIGINT ? on_interrupt : on_end;
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(caught[i], &sa, nullptr);
  }
}

interrupt_cancels::~interrupt_cancels() {
  for (int i = 0; i < 3; ++i)
    ::sigaction(caught[i], &before[i], nullptr);
}

int interrupt_cancels::exit_code(int rc) const {
  auto sig = ended_by.load();
  return sig ? 128 + sig : rc;
}

bool interrupt_cancels::operator()() {
  if (auto sig = ended_by.load()) {
    if (!cancel_sent_) {
      cancel_sent_ = true;
      std::fflush(stdout);
      // One try, no retries: a process told to end does not linger.
      auto r = s_.call<bus::cancel_rep>(bus::cancel_req{job_, operation_id()});
      fmt::print(
          stderr, "\ncq: {}: {}\n", sig == SIGHUP ? "SIGHUP" : "SIGTERM",
          r ? fmt::format("job {} cancelled", job_)
            : fmt::format("cannot cancel job {}: {}", job_, escape_control(r.error().message)));
    }
    return true;
  }
  auto n = interrupts.load();
  if (n == 0)
    return false;
  if (n >= 2) {
    fmt::print(stderr, "\ncq: no longer {} job {}{}\n", doing_, job_,
               cancel_sent_ ? " (its cancel stands)" : "");
    return true;
  }
  if (!cancel_sent_) {
    cancel_sent_ = true;
    std::fflush(stdout);
    auto r = s_.call_retrying<bus::cancel_rep>(bus::cancel_req{job_, operation_id()});
    if (r)
      fmt::print(stderr, "\ncq: cancelling job {}; Ctrl-C again stops {} it\n", job_, doing_);
    else
      fmt::print(stderr, "\ncq: cannot cancel job {}: {}\n", job_,
                 escape_control(r.error().message));
  }
  return false;
}

int report_run_end(session& s, const std::string& id, bool always) {
  auto rep = s.call<bus::show_rep>(bus::show_req{id});
  if (!rep)
    return report_error(rep.error(), false);
  auto code = run_exit_code(rep->job);
  if (always || rep->job.state != bus::job_state::succeeded) {
    // In words, as `cq ls` says it ("exit 3", "oom (cap 1.0 GiB)", "timeout
    // (10m)"), and cq's own exit status where it is not the job's.
    auto words = render_detail::outcome_words(rep->job);
    bool same = words == fmt::format("exit {}", code);
    auto state = std::string(to_string(rep->job.state));
    fmt::print(stderr, "cq: job {} {}{}{}\n", id, state,
               words == state ? "" : ": " + words, // "cancelled", not "cancelled: cancelled"
               same ? "" : fmt::format("; cq exits {}", code));
  }
  return code;
}

} // namespace cq::cli
