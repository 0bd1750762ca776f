#pragma once
// The commands of `cq`. Each one runs to completion and returns the process's
// exit code: 0 on success, else cq::exit_code() of the error it printed (one
// line on stderr, or a JSON object on stdout with --json; see report_error).
// Argument syntax lives in main.cpp; these functions get parsed values.

#include "cq/bus/client.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cq::cli {

/// Prints `e` the CLI's way and returns its exit code:
/// `cq: error: <code>: <message>` on stderr, on one line with the message
/// passed through escape_control(), or with `json`
/// `{"error": {"code": "<code>", "message": "..."}}` on stdout.
int report_error(const bus::error_info& e, bool json);

/// Sleeps before retry `i` (0-based) of a lost reply.
void pause_before_retry(int i);
/// Monotonic milliseconds (the retries' budget).
std::int64_t clock_ms();

/// A connected client for the configured coordinator and identity.
struct session {
  std::string endpoint;
  std::unique_ptr<bus::client> client;

  /// One round trip; an unavailable error gets the endpoint appended.
  template <class Rep, class Req>
  bus::result<Rep> call(const Req& req) {
    auto r = client->template call<Rep>(req);
    if (!r && r.error().code == errc::unavailable)
      return bus::error_info{errc::unavailable, r.error().message + " [endpoint " + endpoint + "]"};
    return r;
  }

  /// A call that is safe to repeat (it carries an operation or job id): a
  /// lost reply is retried with the same request, a few times, while the
  /// retries stay within one more call timeout (an unreachable coordinator
  /// fails after about twice the timeout, not four times).
  template <class Rep, class Req>
  bus::result<Rep> call_retrying(const Req& req) {
    auto started = clock_ms();
    auto r = call<Rep>(req);
    for (int i = 0; i < 3 && !r && r.error().code == errc::unavailable &&
                    clock_ms() - started < 2 * timeout_ms;
         ++i) {
      pause_before_retry(i);
      r = call<Rep>(req);
    }
    return r;
  }
  /// Every request of `reqs` pipelined (client::call_all), each then retried
  /// alone as call_retrying does where its reply was lost, until one retry
  /// finds the coordinator still unavailable (the rest stay unavailable
  /// rather than each taking its retries' time); replies in the order of
  /// `reqs`. Only for requests safe to repeat.
  template <class Rep, class Req>
  std::vector<bus::result<Rep>> call_all_retrying(const std::vector<Req>& reqs) {
    auto out = client->template call_all<Rep>(reqs);
    bool reachable = true;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i] || out[i].error().code != errc::unavailable)
        continue;
      if (reachable)
        out[i] = call_retrying<Rep>(reqs[i]);
      else
        out[i] = bus::error_info{errc::unavailable,
                                 out[i].error().message + " [endpoint " + endpoint + "]"};
      reachable = reachable && (out[i] || out[i].error().code != errc::unavailable);
    }
    return out;
  }
  std::int64_t timeout_ms = 10000; ///< the per-call timeout (config)
};

/// This invocation's operation id (SPEC section 9): the one --operation-id
/// gave, else a UUID made once per run and reused for its retries.
std::string operation_id();
void set_operation_id(std::string id);
/// A fresh random UUID (version 4).
std::string random_uuid();

/// Loads the config and token (config.hpp) and creates the client. Fails
/// without touching the network if the config or the token is unusable.
bus::result<session> open_session();

/// `cq submit`'s options as given; run_submit validates them (each refusal
/// names its flag) before anything is sent.
struct submit_options {
  std::optional<std::string> name; ///< --name; checked against [A-Za-z0-9._-]{1,64}
  std::optional<std::string> ram;  ///< unparsed --ram
  std::string node;                ///< "" = not pinned
  std::string cwd;                 ///< "" = current directory
  std::optional<std::string> priority;
  std::optional<std::string> gpus;
  std::optional<std::string> vram;
  std::optional<std::string> cpus;
  std::optional<std::string> est;
  std::optional<std::string> timeout;
  std::vector<std::string> after; ///< each occurrence of --after, maybe comma-separated
  std::optional<std::string> profile;
  std::optional<std::string> ram_floor;
  std::optional<std::string> ram_start_min;
  std::optional<std::string> preempt;
  std::optional<std::string> lease;      ///< unparsed --lease
  std::optional<std::string> lost_after; ///< unparsed --lost-after (a duration or never)
  bool no_requeue = false;
  bool notify = false; ///< --notify: per-job notify rules apply
  std::optional<std::string> retry_oom;
  std::optional<std::string> output; ///< --output PATTERN, as typed (relative: under the cwd)
  bool env_clear = false;            ///< send no environment from the caller's
  std::vector<std::string> env;      ///< KEY=VALUE, added (after --env-clear, the only ones)
  std::vector<std::string> argv;
  std::optional<std::string> shell;  ///< --shell LINE: run LINE through sh -c
  std::optional<std::string> array;  ///< --array SPEC, unparsed (0-99%4)
  std::optional<std::string> from;   ///< --from FILE: one command per line, one array
  std::optional<std::string> job_id; ///< --job-id (else one is made for this run's retries)
  bool json = false;
  bool quiet = false;         ///< --quiet: the id alone, not how cq sized the job
  bool hold_for_node = false; ///< --hold-for-node: queue it even if no node could run it
  bool hold = false;          ///< --hold: queued on hold, until cq release
  bool pty = false;           ///< cq run --pty: an interactive terminal on the node
};
int run_submit(const submit_options& o);
/// The request `o` makes, validated (each refusal names its flag), with a
/// fresh job id unless --job-id gave one; nothing is sent.
bus::result<bus::submit_req> submit_request(const submit_options& o);
/// Sends a submit request: on `keep`'s session, opened there if it holds
/// none, else on a fresh one.
bus::result<bus::submit_rep> send_submit(const bus::submit_req& req,
                                         std::optional<session>* keep = nullptr);
/// A submit's refusal with the spec's field that begins its message named
/// as the flag that sets it (ram_bytes: -> --ram:, argv[0]: -> the
/// command's word 1:).
bus::error_info in_flag_words(bus::error_info e);
/// What `cq submit` prints for `rep`: the id (an array's own), how cq sized
/// it and the array's size on stderr; --json: the reply. Its exit code.
int report_submitted(const bus::result<bus::submit_rep>& rep, const submit_options& o);
/// How cq sized a submitted job without --ram, on stderr (so that `id=$(cq
/// submit ...)` still gets the id alone).
void tell_sizing(const bus::submit_rep& rep);
/// That a dependency of a submitted job had already ended without success
/// (the job fails at once), on stderr, quiet or not.
void tell_failed_after(const bus::submit_rep& rep);
/// Which of `sent`'s settings differ from the job its --job-id names
/// ("the command and --cwd differ"), for a job_conflict (conflict.cpp).
std::string spec_differences(const bus::job_spec& sent, const bus::job_info& stored);
/// `cq submit --from FILE` (from_file.cpp): its lines as one array's tasks,
/// or, when a line holds a JSON spec, as jobs of their own.
int run_submit_from(const submit_options& o);
/// Submits the job of `o` and returns its id (errors reported, as run_submit
/// does, with the exit code in the error's place). With `keep`, the session
/// it opened stays there for the caller's next requests (cq run's follow:
/// one connection, not two).
bus::result<std::string> submit_job(const submit_options& o,
                                    std::optional<session>* keep = nullptr);
/// `cq run`: submit_job, then the job's output as it is written, then the
/// job's exit code (run_exit_code).
int run_run(const submit_options& o);
/// `cq run --pty` (pty.cpp): submit_job, then this terminal (raw) relayed to
/// the job's terminal on the node until the job ends; its exit code.
int run_pty(const submit_options& o);
/// The exit code `cq run` ends with for a finished job: its own exit code,
/// 128 + N for a signal, and fixed codes for what cq did to it: 137 oom or
/// vram_cap, 124 timeout, 125 launch_failed or refused, 130 cancelled, 1
/// anything else (lost, dependency_failed).
int run_exit_code(const bus::job_info& j);
/// cq run's Ctrl-C, with and without --pty: SIGINT is caught from its
/// construction on. A call after the first Ctrl-C cancels the job (once,
/// saying so); after a second it says cq run stops `doing` the job (its
/// cancel stands) and returns true.
class interrupt_cancels {
public:
  interrupt_cancels(session& s, std::string job, std::string doing);
  ~interrupt_cancels(); ///< the signals' earlier handling back
  interrupt_cancels(const interrupt_cancels&) = delete;
  interrupt_cancels& operator=(const interrupt_cancels&) = delete;
  /// SIGTERM and SIGHUP too: the job is cancelled (one try) and it returns
  /// true at once.
  bool operator()();
  /// cq run's exit after following stopped with `rc`: 128 + the signal
  /// for SIGTERM or SIGHUP, else `rc`.
  int exit_code(int rc) const;

private:
  session& s_;
  std::string job_, doing_;
  bool cancel_sent_ = false;
};
/// How the job ended, as cq run says it on stderr (only when it did not
/// succeed, unless `always`); returns run_exit_code.
int report_run_end(session& s, const std::string& id, bool always);

/// The tasks of the array `ref` names (its id, a prefix of it or its name),
/// in index order; empty when it names no array (listing.cpp).
bus::result<std::vector<bus::job_info>> array_tasks(session& s, const std::string& ref);
/// When `ref` names an array (a command that takes one job was given one),
/// the refusal saying so: the command `does` so, and how to name a task.
std::optional<bus::error_info> one_task_please(session& s, const std::string& ref,
                                               std::string_view does);

/// Which jobs a listing or a cancel of many takes (each empty one: any).
struct job_filter {
  std::vector<std::string> states;  ///< --state, comma-separated states, live, done
  std::optional<std::string> name;  ///< --name, a shell pattern
  std::optional<std::string> owner; ///< --owner
  std::optional<std::string> node;  ///< --node
  bool mine = false;                ///< --mine: the caller's identity's
};
struct ls_options {
  bool all = false;
  bool json = false;
  job_filter filter;
  std::optional<std::uint64_t> watch_ms; ///< --watch: redraw this often
  bool expand = false;                   ///< --expand: every array task on its own row
  /// --limit: at most this many rows (0: every row); if absent,
  /// ls_default_rows on a terminal and every row otherwise.
  std::optional<std::uint64_t> limit;
  std::optional<std::string> limit_text; ///< --limit as typed (run_ls checks it)
};
/// How many rows `cq ls` shows on a terminal without --limit.
inline constexpr std::uint64_t ls_default_rows = 100;
/// `refs` with each one that names an array (its id, a prefix or its name)
/// and no job replaced by the array's tasks (`live_only`: those not finished
/// yet; an array with none left goes into `ended` as a refusal instead).
/// A task found by expand_arrays: its array and how many tasks that has.
struct array_part {
  std::string array;
  std::size_t tasks = 0;
  bool ended = false; ///< this task had ended when it was listed
};
bus::result<std::vector<std::string>>
expand_arrays(session& s, const std::vector<std::string>& refs, bool live_only,
              std::vector<std::pair<std::string, bus::error_info>>* ended = nullptr,
              std::map<std::string, array_part>* parts = nullptr);
int run_ls(const ls_options& o);
int run_show(const std::string& job, bool json, bool verbose);
struct cancel_options {
  std::vector<std::string> jobs; ///< ids, prefixes or names
  job_filter filter;             ///< and every live job these select
  bool json = false;
};
int run_cancel(const cancel_options& o);
/// `cq retry JOB`: submits a finished job's spec again (this shell's environment).
int run_retry(const std::string& job, bool json, bool quiet);
int run_whoami(bool json);
/// cq clean [--older-than DURATION] [--dry-run]: forgets finished jobs now
/// (with `dry_run`, only counts them).
int run_clean(const std::optional<std::string>& older_than, bool dry_run, bool json);
/// `cq hold JOB...` keeps queued jobs from starting; `cq release JOB...`
/// (`release`) lets them start again. An array's id takes its queued tasks.
int run_hold(const std::vector<std::string>& jobs, bool release, bool json);

struct move_options {
  std::string job;
  bool front = false;
  bool back = false;
  std::optional<std::string> before;
  std::optional<std::string> after;
  std::optional<std::string> priority;
  bool json = false;
};
int run_move(const move_options& o);

struct logs_options {
  std::string job;
  std::optional<std::string> tail_text; ///< --tail as typed (run_logs checks it into tail)
  std::optional<std::uint64_t> tail;    ///< print only the last N lines
  bool follow = false;
  std::string allocation; ///< "" = the job's latest allocation
  bool quiet = false;     ///< only the output: not why the job waits (cq run -q)
};
int run_logs(const logs_options& o);
/// The loop of run_logs over an open session; `interrupted` is asked between
/// reads (true: stop following and return 130).
int follow_logs(session& s, const logs_options& o, const std::function<bool()>& interrupted);

/// `timeout_s` < 0 means no timeout.
/// `timeout`: --timeout as typed (a duration, or 0 to look once).
int run_wait(const std::vector<std::string>& jobs, const std::optional<std::string>& timeout,
             bool json);

/// A follower's pause: returns once job `job` has an event after `cursor`
/// (which it advances) or `max_ms` passed, whichever comes first (a long
/// poll on the coordinator; a plain sleep where that read fails). So a
/// follower learns of a start or an end at once, not at its next poll.
void wait_for_news(session& s, const std::string& job, std::uint64_t& cursor, std::int64_t max_ms);

int run_preempt(const std::string& job, bool json);

struct events_options {
  std::vector<std::string> jobs; ///< empty = every job's
  bool follow = false;
  std::optional<std::uint64_t> since; ///< only events with a larger per-job seq
  bool json = false;                  ///< one JSON object per line
};
int run_events(const events_options& o);

int run_node_invite(const std::string& name, bool replace, bool json);
int run_node_approve(const std::string& name, bool json);
int run_node_ls(bool json);
int run_node_clear_fault(const std::string& name, const std::string& reason, bool json);
int run_release(const std::string& hold, bool json);

int run_profile_ls(bool json);
int run_profile_rm(const std::string& key, bool json);

int run_node_enable(const std::string& name, bool json);
int run_node_disable(const std::string& name, const std::optional<std::string>& reason, bool json);
/// `cq node diagnostic NODE JOB --reason TEXT` grants; without JOB, shows.
int run_node_diagnostic(const std::string& node, const std::optional<std::string>& job,
                        const std::optional<std::string>& reason, bool json);
int run_token_add(const std::string& name, const std::string& role, bool json);
int run_token_ls(bool json);
int run_token_revoke(const std::string& name, bool json);

struct audit_options {
  std::optional<std::string> since; ///< a duration ago (1h) or epoch ms
  std::optional<std::string> who;
  std::optional<std::string> op;
  std::optional<std::string> target;
  bool json = false;
};
int run_audit(const audit_options& o);

struct login_options {
  std::string url;
  std::string token;
  std::optional<std::string> server_key; ///< Z85 CURVE public key of the coordinator
  /// The same coordinator's Unix socket on this machine (cq-coordinator
  /// --local-socket): written to <config>/local.
  std::optional<std::string> local_socket;
};
int run_login(const login_options& o);

struct up_options {
  std::uint16_t port = 7800;
  bool port_given = false;     ///< --port was typed (else a running coordinator's port stands)
  std::string state_dir;       ///< "" = $HOME/.local/share/cq
  std::string node_name;       ///< "" = <state>/node.name if present, else the host name
  std::uint16_t http_port = 0; ///< --http PORT: the status page on 127.0.0.1 (0 = none)
};
int run_up(const up_options& o);
int run_down(const std::string& state_dir);

} // namespace cq::cli
