// cq run --pty: an interactive terminal on the node, in the job's allocation
// (srun --pty's habit). Until the job starts, Ctrl-C cancels it as cq run's
// does; once it runs this terminal is raw and every key goes to the job,
// Ctrl-C included, through the coordinator (the terminal op) to the node,
// where cq-shim gives the workload a terminal of its own. What the job's
// terminal shows is its output log, read here as cq logs -f reads it. The
// window's size goes along at the start and on each SIGWINCH. The session
// ends when the job does; this terminal is restored on every way out.
#include "commands.hpp"
#include "cq/cli/escape.hpp"
#include "output.hpp"
#include "sys.hpp"

#include <fmt/format.h>

#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace cq::cli {

namespace {

std::atomic<bool> resized{false};
struct termios saved_tty {};
std::atomic<bool> raw_on{false};

extern "C" void pty_on_winch(int) {
  resized.store(true);
}
/// The terminal back as it was, then the default end of the signal.
extern "C" void pty_on_fatal(int sig) {
  if (raw_on.load())
    ::tcsetattr(0, TCSANOW, &saved_tty);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void restore_tty() {
  if (raw_on.exchange(false))
    ::tcsetattr(0, TCSANOW, &saved_tty);
}

bool enter_raw() {
  if (::tcgetattr(0, &saved_tty) != 0)
    return false;
  struct termios raw = saved_tty;
  ::cfmakeraw(&raw);
  raw_on = true;
  std::atexit(restore_tty);
  for (int sig : {SIGTERM, SIGHUP, SIGQUIT})
    ::signal(sig, pty_on_fatal);
  return ::tcsetattr(0, TCSANOW, &raw) == 0;
}

struct window {
  std::uint64_t rows = 0, cols = 0;
};
window window_size() {
  struct winsize ws {};
  if (::ioctl(0, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0)
    return {24, 80};
  return {ws.ws_row, ws.ws_col};
}

/// Waits until the job has an allocation (true) or ends first (false);
/// Ctrl-C cancels it meanwhile. `code` is set when cq run should end now.
bool wait_for_start(session& s, const std::string& id, std::optional<int>& code) {
  interrupt_cancels interrupted(s, id, "waiting for");
  std::int64_t next_why_ms = 0;
  std::string said;
  std::uint64_t events_cursor = 0;
  for (;;) {
    if (interrupted()) {
      code = interrupted.exit_code(130);
      return false;
    }
    auto rep = s.call<bus::logs_rep>(bus::logs_req{id, 0, 1});
    if (!rep && rep.error().code != errc::unavailable) {
      code = report_error(rep.error(), false);
      return false;
    }
    if (rep && !rep->allocation.empty())
      return true;
    if (rep && rep->terminal)
      return false;
    if (sys::mono_ms() >= next_why_ms) {
      next_why_ms = sys::mono_ms() + 2000;
      if (auto why = s.call<bus::show_rep>(bus::show_req{id}))
        tell_waiting(*why, said);
    }
    wait_for_news(s, id, events_cursor, 200); // its start ends the pause
  }
}

/// The relay, in raw mode, until the job's terminal has said its last;
/// an error's message when the coordinator cannot be reached for long.
std::optional<std::string> relay(session& s, const std::string& id) {
  bus::logs_req read{id, 0, 64 << 10};
  std::string allocation;
  std::string typed; // keys not yet taken by the job's terminal
  bool size_sent = false;
  int quiet_rounds = 0; // rounds with nothing in or out: the poll slows down
  std::int64_t unavailable_since = -1;
  bool keys_open = true; // this side's input has not ended
  for (;;) {
    // Keys, when there are any (the wait is the loop's pace).
    int wait = quiet_rounds == 0 ? 0 : std::min(10 * quiet_rounds, 100);
    bool moved = false;
    if (keys_open && typed.size() < (1 << 20)) {
      auto before = typed.size();
      keys_open = sys::read_input(wait, typed); // ended: the job keeps its own input
      moved = typed.size() != before;
    } else {
      sys::sleep_ms(wait);
    }
    // Window size (first, then on each change) and keys, in order.
    bool closed = false;
    if (resized.exchange(false))
      size_sent = false;
    while (!closed && (!size_sent || !typed.empty())) {
      bus::terminal_req req{id, {}};
      if (!size_sent) {
        auto w = window_size();
        req.rows = w.rows, req.cols = w.cols;
      }
      req.data = typed.substr(0, bus::limits::terminal_input_bytes);
      auto r = s.call<bus::terminal_rep>(req);
      if (!r) {
        if (r.error().code == errc::invalid_state) // it ended: the log says the rest
          typed.clear(), size_sent = true;
        closed = true; // not open yet, busy, or unreachable: next round
        break;
      }
      size_sent = true;
      typed.erase(0, req.data.size());
    }
    // What the job's terminal showed since.
    auto rep = s.call<bus::logs_rep>(read);
    if (!rep) {
      if (rep.error().code != errc::unavailable)
        return rep.error().message;
      if (unavailable_since < 0)
        unavailable_since = sys::mono_ms();
      if (sys::mono_ms() - unavailable_since > 120'000)
        return rep.error().message;
      sys::sleep_ms(200);
      continue;
    }
    unavailable_since = -1;
    if (allocation.empty()) {
      allocation = rep->allocation;
    } else if (rep->allocation != allocation) {
      // Started again (an OOM under a cap cq chose): a new terminal, read
      // from its start.
      allocation = rep->allocation;
      read.offset = 0;
      size_sent = false;
      write_stdout(fmt::format("\r\ncq: job {} started again: a new terminal\r\n", id));
      continue;
    }
    if (!rep->data.empty()) {
      write_stdout(rep->data);
      std::fflush(stdout);
      moved = true;
    }
    read.offset = rep->next_offset;
    if (rep->terminal && rep->eof)
      return std::nullopt;
    quiet_rounds = moved ? 0 : quiet_rounds + 1;
  }
}

} // namespace

int run_pty(const submit_options& o) {
  if (!::isatty(0))
    return report_error({errc::invalid_argument,
                         "--pty: standard input is not a terminal (run it from one, or leave "
                         "out --pty to follow the output only)"},
                        false);
  auto id = submit_job(o);
  if (!id)
    return report_error(id.error(), false);
  struct sigaction wn {};
  wn.sa_handler = pty_on_winch;
  ::sigemptyset(&wn.sa_mask);
  ::sigaction(SIGWINCH, &wn, nullptr);
  auto s = open_session();
  if (!s)
    return report_error(s.error(), false);
  fmt::print(stderr, "cq: job {}: waiting to start (Ctrl-C cancels it)\n", *id);
  std::optional<int> code;
  if (wait_for_start(*s, *id, code)) {
    fmt::print(stderr, "cq: job {} started: keys go to it\n", *id);
    if (!enter_raw())
      fmt::print(stderr, "cq: this terminal cannot be made raw: keys go through as lines\n");
    auto failed = relay(*s, *id);
    restore_tty();
    if (failed)
      return report_error({errc::unavailable, *failed}, false);
  } else if (code) {
    return *code;
  }
  fmt::print(stderr, "\n");
  return report_run_end(*s, *id, true);
}

} // namespace cq::cli
