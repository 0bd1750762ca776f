// cq: the command line client. Parses arguments (CLI11) and runs one command.
// Exit codes (SPEC section 7): 0 ok, else cq::exit_code() of the error;
// usage errors are invalid_argument (2).

#include "commands.hpp"
#include "completion.hpp"
#include "cq/units.hpp"
#include "cq/version.hpp"
#include "hints.hpp"

#include "cq/help_format.hpp"

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace {

/// True if `--json` appears among the arguments before a `--` separator, so
/// that even a usage error is reported as JSON to a script that asked for it.
bool wants_json(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0)
      return false;
    if (std::strcmp(argv[i], "--json") == 0)
      return true;
  }
  return false;
}

/// The names of `app`'s subcommands, in the order they were added.
std::vector<std::string> subcommand_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands({}))
    names.push_back(sub->get_name());
  return names;
}

/// The top-level commands (main() builds only the one named, see there).
constexpr std::string_view command_names[] = {
    "submit",  "run",    "ls",    "show",  "retry",   "whoami", "clean", "completion",
    "logs",    "cancel", "move",  "wait",  "preempt", "events", "node",  "hold",
    "release", "token",  "audit", "login", "profile", "up",     "down"};

/// Whether the command `c` ran (one that was not built did not).
bool ran(const CLI::App* c) {
  return c && c->parsed();
}

/// `app`'s subcommand `name`; nullptr when it has none of that name.
CLI::App* subcommand_named(CLI::App& app, const char* name) {
  for (auto* sub : app.get_subcommands({}))
    if (sub->get_name() == name)
      return sub;
  return nullptr;
}

/// "--ram" for "-ram" (one dash before a long option's name) when `sub`
/// has that option; "" otherwise.
std::string dash_hint(const CLI::App* sub, std::string_view word) {
  if (!sub || word.size() < 3 || word[0] != '-' || word[1] == '-')
    return {};
  auto name = "--" + std::string(word.substr(1, word.find('=') - 1));
  return sub->get_option_no_throw(name) ? name : std::string();
}

} // namespace

int main(int argc, char** argv) {
  using namespace cq::cli;
  CLI::App app{"cq: a job queue for shared GPU machines", "cq"};
  cq::use_help_format(app);
  app.require_subcommand(1);
  app.set_version_flag("--version", fmt::format("cq {} (commit {})", cq::version(), cq::commit()));

  // Only the command the first argument names is built: CLI11's options for
  // every command cost about a millisecond, a good part of a short command's
  // whole run. Everything is built when the first argument names no command
  // (help, --version, a typo to suggest for) and for `cq completion`.
  std::string_view first = argc > 1 ? argv[1] : "";
  bool build_all = first == "completion" ||
                   std::find(std::begin(command_names), std::end(command_names), first) ==
                       std::end(command_names);
  auto want = [&](std::string_view name) { return build_all || first == name; };

  // Values are kept as text here and checked by the command, so that every
  // refusal reads `--FLAG: why`.
  auto text_option = [](CLI::App* app, const char* flag, std::optional<std::string>& to,
                        const char* type, const char* help) {
    app->add_option_function<std::string>(
           flag, [&to](const std::string& v) { to = v; }, help)
        ->type_name(type);
  };
  // The submit options, for `cq submit` and `cq run` alike.
  auto add_submit_options = [&text_option](CLI::App* sub, submit_options& submit) {
    text_option(sub, "--name", submit.name, "NAME",
                "Display name: 1..64 of A-Z a-z 0-9 . _ - (default: from the command)");
    text_option(sub, "--ram", submit.ram, "SIZE",
                "RAM cap in binary units: bytes, or 512M, 1.5G, 2T");
    sub->add_option("--node", submit.node, "Run only on this node");
    sub->add_option("--cwd", submit.cwd, "Working directory on the node (default: this one)");
    text_option(sub, "--output", submit.output, "PATTERN",
                "Also write the output (stdout and stderr) to this file, as the job's user: "
                "%j job id, %a array index, %x name, %n node, %% a percent sign (relative: "
                "under the working directory)");
    text_option(sub, "--priority", submit.priority, "LEVEL", "high, medium (default) or low");
    text_option(sub, "--gpus", submit.gpus, "N", "Whole GPU lanes, held exclusively (0..64)");
    text_option(sub, "--vram", submit.vram, "SIZE", "VRAM per lane, binary units");
    text_option(sub, "--cpus", submit.cpus, "N",
                "CPUs reserved (0..1024, default 1; 0 for a job that needs none)");
    text_option(sub, "--est", submit.est, "DURATION",
                "Expected wall time: seconds, or 500ms, 90s, 10m, 2h, 1d, 1h30m");
    text_option(sub, "--timeout", submit.timeout, "DURATION",
                "Hard wall-time limit; the job is killed after it");
    sub->add_option("--after", submit.after,
                    "Start only after this job succeeded (repeatable, or JOB,JOB)")
        ->type_name("JOB")
        ->allow_extra_args(false);
    text_option(sub, "--profile", submit.profile, "KEY",
                "Profile key for measured RAM and time (default: from the command)");
    text_option(sub, "--ram-floor", submit.ram_floor, "SIZE",
                "MemAvailable to keep free on the node beyond this job's cap");
    text_option(sub, "--ram-start-min", submit.ram_start_min, "SIZE",
                "Start only while the node's MemAvailable is at least this");
    text_option(sub, "--preempt", submit.preempt, "MODE",
                "never (default) or checkpoint (may be asked to yield)");
    text_option(sub, "--lease", submit.lease, "DURATION",
                "Lease length: a checkpointing job may be asked to yield only at its boundaries "
                "(default: the coordinator's, 30m)");
    text_option(sub, "--lost-after", submit.lost_after, "DURATION",
                "An allocation on a down node is lost (requeued) after this, or never "
                "(default: the coordinator's, 5m)");
    sub->add_flag("--no-requeue", submit.no_requeue,
                  "A lost allocation fails the job (reason lost)");
    sub->add_flag("--notify", submit.notify,
                  "Tell me about this job: the coordinator's per-job notify rules apply to it");
    text_option(
        sub, "--retry-oom", submit.retry_oom, "N",
        "Requeue a job that hits its RAM cap up to N times, the cap x1.5 each time (0..10)");
    sub->add_flag("--env-clear", submit.env_clear,
                  "Send none of this shell's environment (only --env variables)");
    sub->add_option("--env", submit.env, "Set KEY=VALUE in the job's environment (repeatable)")
        ->type_name("KEY=VALUE")
        ->allow_extra_args(false);
    text_option(sub, "--job-id", submit.job_id, "UUID",
                "Make the submit idempotent: the same id and spec return the stored job");
    sub->add_flag("--quiet,-q", submit.quiet,
                  sub->get_name() == "submit"
                      ? "Print the job id only (not how cq sized a job without --ram)"
                      : "Print only the job's output (and cq's one line if it fails)");
    // cq run follows one job as it runs: what only queues is cq submit's.
    if (sub->get_name() == "submit") {
      sub->add_flag("--json", submit.json, "Print the reply as JSON");
      sub->add_flag("--hold-for-node", submit.hold_for_node,
                    "Queue it even if no node could ever run it (for a node yet to join)");
      sub->add_flag("--hold", submit.hold, "Queue it on hold: it starts once cq release lets it");
      text_option(sub, "--array", submit.array, "SPEC",
                  "An array of tasks: 0-99, 1,3,5 or 0-99:2, then %N to run at most N at once");
      text_option(sub, "--from", submit.from, "FILE",
                  "Submit every line of FILE (- for stdin) as a command, all as one array");
    }
    text_option(sub, "--shell", submit.shell, "LINE",
                "Run LINE through sh -c (pipes, &&, redirections) instead of a command after --");
    // The job's command is the first word that is not one of these options,
    // and every word after it, options included (`cq submit grep --name x f`
    // runs `grep --name x f`): CLI11 stops there and leaves the rest.
    sub->prefix_command();
    sub->footer(fmt::format("The job's command follows the options, after `--` or without it: "
                            "cq {} [OPTIONS] [--] PROGRAM ARGS... Every word from PROGRAM on is "
                            "the command's, options included.",
                            sub->get_name()));
  };
  submit_options submit;
  CLI::App* sub = nullptr;
  if (want("submit")) {
    sub = app.add_subcommand("submit", "Queue a command; prints its job id");
    add_submit_options(sub, submit);
  }
  submit_options run;
  CLI::App* runc = nullptr;
  if (want("run")) {
    runc = app.add_subcommand(
        "run", "Submit a command, print its output as it runs, and exit with its exit code "
               "(Ctrl-C cancels it; a second Ctrl-C stops following)");
    add_submit_options(runc, run);
    runc->add_flag("--pty", run.pty,
                   "An interactive terminal on the node, in the job's allocation (like srun "
                   "--pty): keys go to the job, Ctrl-C included, once it starts");
  }

  // Filters shared by ls and cancel.
  auto add_filters = [&text_option](CLI::App* c, job_filter& f) {
    c->add_option("--state", f.states,
                  "Only jobs in these states: queued, running, failed, ... live, done "
                  "(comma-separated or repeated)")
        ->type_name("STATE")
        ->allow_extra_args(false);
    text_option(c, "--name", f.name, "PATTERN", "Only jobs whose name matches (train-*)");
    text_option(c, "--owner", f.owner, "NAME", "Only jobs of this identity");
    text_option(c, "--node", f.node, "NAME", "Only jobs on this node");
    c->add_flag("--mine", f.mine, "Only your own jobs");
  };
  ls_options lso;
  std::optional<std::string> ls_interval;
  bool ls_watch = false;
  CLI::App* ls = nullptr;
  if (want("ls")) {
    ls = app.add_subcommand("ls", "List jobs in serving order (running, queued, finished)");
    ls->add_flag("--all,-a", lso.all, "Include finished jobs");
    add_filters(ls, lso.filter);
    ls->add_flag("--watch,-w", ls_watch, "Redraw the list every few seconds until Ctrl-C");
    text_option(ls, "--interval", ls_interval, "DURATION", "How often --watch redraws (2s)");
    ls->add_flag("--expand", lso.expand, "Every task of an array on its own row");
    text_option(ls, "--limit", lso.limit_text, "N",
                "Show at most N rows, the first in serving order (0: all; default 100 on a "
                "terminal, all otherwise); with --json, the first N jobs in submission order");
    ls->add_flag("--json", lso.json, "Print JSON");
  }

  std::string show_job;
  bool show_json = false, show_verbose = false;
  CLI::App* show = nullptr;
  if (want("show")) {
    show = app.add_subcommand("show", "Show one job and its attempts");
    show->add_option("job", show_job, "Job id, id prefix or name")->required();
    show->add_flag("--verbose,-v", show_verbose, "Every setting, defaults too");
    show->add_flag("--json", show_json, "Print JSON");
  }

  std::string retry_job;
  bool retry_json = false, retry_quiet = false;
  CLI::App* retry = nullptr;
  if (want("retry")) {
    retry = app.add_subcommand(
        "retry",
        "Submit a finished job again: same command and settings, this shell's environment");
    retry->add_option("job", retry_job, "Job id, id prefix or name")->required();
    retry->add_flag("--quiet,-q", retry_quiet, "Print the new job's id only");
    retry->add_flag("--json", retry_json, "Print JSON");
  }

  bool whoami_json = false;
  CLI::App* whoami = nullptr;
  if (want("whoami")) {
    whoami = app.add_subcommand("whoami", "Say which identity and role your token is");
    whoami->add_flag("--json", whoami_json, "Print JSON");
  }
  std::optional<std::string> clean_older;
  bool clean_json = false, clean_dry = false;
  CLI::App* clean = nullptr;
  if (want("clean")) {
    clean = app.add_subcommand(
        "clean", "Forget finished jobs and their files on the nodes now (owner or operator)");
    text_option(clean, "--older-than", clean_older, "DURATION",
                "Only jobs that ended more than this long ago (e.g. 7d); default: every one");
    clean->add_flag("--dry-run,-n", clean_dry,
                    "Only say how many finished jobs it would forget; nothing changes");
    clean->add_flag("--json", clean_json, "Print JSON");
  }

  std::string completion_shell;
  CLI::App* completion = nullptr;
  if (want("completion")) {
    completion = app.add_subcommand(
        "completion", "Print a shell completion script: source <(cq completion bash)");
    completion->add_option("shell", completion_shell, "bash, zsh or fish")->required();
  }

  logs_options logs;
  CLI::App* lg = nullptr;
  if (want("logs")) {
    lg = app.add_subcommand("logs", "Print a job's output");
    lg->add_option("job", logs.job, "Job id, id prefix or name")->required();
    text_option(lg, "--tail,-n", logs.tail_text, "N", "Print only the last N lines");
    lg->add_flag("--follow,-f", logs.follow, "Keep printing new output until the job ends");
    lg->add_option("--allocation", logs.allocation, "Read this allocation (default: the latest)");
  }

  std::optional<std::string> op_id;
  auto with_op_id = [&](CLI::App* c) {
    text_option(c, "--operation-id", op_id, "UUID",
                "Make the call idempotent: a replay returns the stored result");
  };
  cancel_options cancel_o;
  CLI::App* cancel = nullptr;
  if (want("cancel")) {
    cancel = app.add_subcommand(
        "cancel", "Cancel jobs: by id, prefix or name, or every live job a filter selects");
    cancel->add_option("jobs", cancel_o.jobs, "Job ids, id prefixes or names");
    add_filters(cancel, cancel_o.filter);
    cancel->add_flag("--json", cancel_o.json, "Print JSON");
    with_op_id(cancel);
  }

  move_options move;
  CLI::App* mv = nullptr;
  if (want("move")) {
    mv = app.add_subcommand("move", "Move a queued job in the serving order");
    mv->add_option("job", move.job, "Job id, id prefix or name")->required();
    mv->add_flag("--front", move.front, "To the front of its level");
    mv->add_flag("--back", move.back, "To the back of its level");
    text_option(mv, "--before", move.before, "JOB", "Just before JOB (takes JOB's level)");
    text_option(mv, "--after", move.after, "JOB", "Just after JOB (takes JOB's level)");
    text_option(mv, "--priority", move.priority, "LEVEL",
                "Change the level to high, medium or low (alone: back of that level)");
    mv->add_flag("--json", move.json, "Print JSON");
    with_op_id(mv);
  }

  std::vector<std::string> wait_jobs;
  std::optional<std::string> wait_timeout;
  bool wait_json = false;
  CLI::App* wait = nullptr;
  if (want("wait")) {
    wait = app.add_subcommand(
        "wait", "Wait until jobs finish; exit 0 only if all succeeded (else 5, invalid_state)");
    wait->add_option("jobs", wait_jobs, "Job ids, id prefixes or names")->required();
    text_option(wait, "--timeout", wait_timeout, "DURATION",
                "Give up after this long (exit 1): seconds, or 500ms, 90s, 10m, 2h");
    wait->add_flag("--json", wait_json,
                   "Print the final jobs as JSON (with an \"error\" beside them if one did "
                   "not succeed)");
  }

  std::string preempt_job;
  bool preempt_json = false;
  CLI::App* preempt = nullptr;
  if (want("preempt")) {
    preempt = app.add_subcommand(
        "preempt",
        "Ask a running --preempt checkpoint job to yield now (it exits 6 to checkpoint)");
    preempt->add_option("job", preempt_job, "Job id, id prefix or name")->required();
    preempt->add_flag("--json", preempt_json, "Print JSON");
  }

  events_options events;
  CLI::App* ev = nullptr;
  if (want("events")) {
    ev = app.add_subcommand("events", "Print jobs' events (every job's without JOB)");
    ev->add_option("jobs", events.jobs, "Job ids");
    ev->add_flag("--follow,-f", events.follow,
                 "Keep printing new events (survives restarts); without jobs, from now on "
                 "(--since 0 prints the history first)");
    ev->add_option("--since", events.since, "Only events with a larger per-job seq")
        ->type_name("SEQ");
    ev->add_flag("--json", events.json, "One JSON object per line");
  }

  std::string invite_name, approve_name;
  bool invite_json = false, approve_json = false, node_ls_json = false;
  bool invite_replace = false;
  std::string enable_name, disable_name;
  std::optional<std::string> disable_reason;
  bool enable_json = false, disable_json = false;
  std::string diag_node;
  std::optional<std::string> diag_job, diag_reason;
  bool diag_json = false;
  std::string clear_name, clear_reason;
  bool clear_json = false;
  CLI::App* node = nullptr;
  CLI::App* invite = nullptr;
  CLI::App* approve = nullptr;
  CLI::App* enable = nullptr;
  CLI::App* disable = nullptr;
  CLI::App* diag = nullptr;
  CLI::App* node_ls = nullptr;
  CLI::App* clear = nullptr;
  if (want("node")) {
    node = app.add_subcommand("node", "Manage nodes (alone: cq node ls)");
    node->require_subcommand(0, 1);
    invite = node->add_subcommand("invite", "Create a one-time join code for a node");
    invite->add_option("name", invite_name, "Node name")->required();
    invite->add_flag("--replace", invite_replace,
                     "The node already joined: revoke its token now (its daemon is refused) and "
                     "let a new daemon join under the name (pending approval again)");
    invite->add_flag("--json", invite_json, "Print JSON");
    approve = node->add_subcommand("approve", "Approve a node that joined");
    approve->add_option("name", approve_name, "Node name")->required();
    approve->add_flag("--json", approve_json, "Print JSON");
    with_op_id(approve);
    enable = node->add_subcommand("enable", "Let a disabled node take new work (Owner, Operator)");
    enable->add_option("name", enable_name, "Node name")->required();
    enable->add_flag("--json", enable_json, "Print JSON");
    with_op_id(enable);
    disable = node->add_subcommand("disable",
                                   "Give a node no new work; what runs finishes (Owner, Operator)");
    disable->add_option("name", disable_name, "Node name")->required();
    text_option(disable, "--reason", disable_reason, "TEXT", "Why (shown in cq node ls)");
    disable->add_flag("--json", disable_json, "Print JSON");
    with_op_id(disable);
    diag = node->add_subcommand(
        "diagnostic",
        "Owner: let one queued job pinned to a disabled node start there once; without JOB, show "
        "the node's grant");
    diag->add_option("name", diag_node, "Node name")->required();
    diag->add_option("job", diag_job, "The queued job (attempt 0, --node NAME)");
    text_option(diag, "--reason", diag_reason, "TEXT", "Why this one run is allowed");
    diag->add_flag("--json", diag_json, "Print JSON");
    with_op_id(diag);
    node_ls = node->add_subcommand(
        "ls", "List nodes: state, memory in GiB (available/total), CPUs, GPUs, running jobs");
    node_ls->add_flag("--json", node_ls_json, "Print JSON");
    clear = node->add_subcommand("clear-fault", "Clear a node's latched kernel GPU fault (Owner)");
    clear->add_option("name", clear_name, "Node name")->required();
    clear->add_option("--reason", clear_reason, "What was checked, and why it is safe again")
        ->required();
    clear->add_flag("--json", clear_json, "Print JSON");
    with_op_id(clear);
  }

  std::vector<std::string> hold_jobs;
  bool hold_json = false;
  CLI::App* hold = nullptr;
  if (want("hold")) {
    hold = app.add_subcommand(
        "hold", "Keep queued jobs from starting until cq release JOB (an array's id: its tasks)");
    hold->add_option("jobs", hold_jobs, "Job ids, id prefixes or names")->required();
    hold->add_flag("--json", hold_json, "Print JSON");
    with_op_id(hold);
  }

  std::string release_hold;
  std::vector<std::string> release_jobs;
  bool release_json = false;
  CLI::App* release = nullptr;
  if (want("release")) {
    release = app.add_subcommand(
        "release", "Let held jobs start (cq release JOB...), or release a node's hold (Attention) "
                   "after checking the machine: cq release --hold ID");
    release->add_option("jobs", release_jobs, "Jobs kept by cq hold");
    release->add_option("--hold", release_hold, "A node's hold id, from cq node ls --json");
    release->add_flag("--json", release_json, "Print JSON");
    with_op_id(release);
  }

  std::string token_name, token_role, revoke_name;
  bool token_add_json = false, token_ls_json = false, token_revoke_json = false;
  CLI::App* token = nullptr;
  CLI::App* token_add = nullptr;
  CLI::App* token_ls = nullptr;
  CLI::App* token_revoke = nullptr;
  if (want("token")) {
    token = app.add_subcommand("token", "Manage tokens (Owner)");
    token->require_subcommand(1);
    token_add = token->add_subcommand(
        "add", "Make a token for NAME with ROLE (printed once; keep it 0600)");
    token_add->add_option("name", token_name, "Identity name")->required();
    token_add->add_option("role", token_role, "owner, operator or submitter")->required();
    token_add->add_flag("--json", token_add_json, "Print JSON");
    token_ls = token->add_subcommand("ls", "List valid tokens (never their secrets)");
    token_ls->add_flag("--json", token_ls_json, "Print JSON");
    token_revoke = token->add_subcommand("revoke", "Revoke NAME's tokens");
    token_revoke->add_option("name", revoke_name, "Identity name")->required();
    token_revoke->add_flag("--json", token_revoke_json, "Print JSON");
  }

  audit_options audit;
  CLI::App* auditc = nullptr;
  if (want("audit")) {
    auditc = app.add_subcommand("audit", "Print the audit log (Owner, Operator)");
    text_option(auditc, "--since", audit.since, "DURATION", "Only rows of the last DURATION (1h)");
    text_option(auditc, "--who", audit.who, "NAME", "Only calls by NAME");
    text_option(auditc, "--op", audit.op, "OP", "Only this operation (submit, cancel, ...)");
    text_option(auditc, "--target", audit.target, "ID", "Only calls on this job, node or hold");
    auditc->add_flag("--json", audit.json, "Print JSON");
  }

  login_options login;
  CLI::App* loginc = nullptr;
  if (want("login")) {
    loginc = app.add_subcommand(
        "login", "Write this profile (CQ_CONFIG_DIR or ~/.config/cq): coordinator URL and token");
    loginc->add_option("url", login.url, "HOST:PORT or tcp://HOST:PORT")->required();
    loginc->add_option("token", login.token, "The token cq token add printed")->required();
    text_option(loginc, "--server-key", login.server_key, "KEY",
                "The coordinator's CURVE public key (cq-coordinator --show-key); needed off "
                "loopback");
    text_option(loginc, "--local-socket", login.local_socket, "PATH",
                "On the coordinator's machine: its Unix socket (the service's is "
                "/run/cq-coordinator/cq.sock), faster than TCP");
  }

  bool profile_ls_json = false;
  std::string profile_rm_key;
  bool profile_rm_json = false;
  CLI::App* profile = nullptr;
  CLI::App* profile_ls = nullptr;
  CLI::App* profile_rm = nullptr;
  if (want("profile")) {
    profile = app.add_subcommand("profile", "Inspect what earlier runs measured (alone: ls)");
    profile->require_subcommand(0, 1);
    profile_ls = profile->add_subcommand("ls", "List profiles");
    profile_ls->add_flag("--json", profile_ls_json, "Print JSON");
    profile_rm = profile->add_subcommand(
        "rm", "Forget a profile: the next job with its key is sized anew (the default cap)");
    profile_rm->add_option("key", profile_rm_key, "The profile's key (cq profile ls)")->required();
    profile_rm->add_flag("--json", profile_rm_json, "Print JSON");
  }

  up_options up;
  CLI::App* upc = nullptr;
  if (want("up")) {
    upc = app.add_subcommand("up", "Start a coordinator and a node for this machine (loopback)");
    upc->add_option("--port", up.port, "Coordinator port on 127.0.0.1 (7800)")
        ->type_name("PORT")
        ->check(CLI::Range(1, 65535).description(""));
    upc->add_option("--state", up.state_dir, "State dir (default: ~/.local/share/cq)");
    upc->add_option("--node-name", up.node_name, "Node name (default: the host name)");
    upc->add_option("--http", up.http_port,
                    "Serve the status page and /metrics on 127.0.0.1:PORT (e.g. 7880)")
        ->type_name("PORT")
        ->check(CLI::Range(1, 65535).description(""));
  }

  std::string down_state;
  CLI::App* down = nullptr;
  if (want("down")) {
    down = app.add_subcommand("down", "Stop what `cq up` started");
    down->add_option("--state", down_state, "State dir (default: ~/.local/share/cq)");
  }

  // The job's command of `cq submit` is everything after the first `--`, taken
  // verbatim (a later `--` belongs to the command); CLI11 parses only what is
  // before it. The subcommand must be the first argument: cq has no global options.
  bool is_submit =
      argc > 1 && (std::strcmp(argv[1], "submit") == 0 || std::strcmp(argv[1], "run") == 0);
  auto& given = argc > 1 && std::strcmp(argv[1], "run") == 0 ? run : submit;
  int parse_argc = argc;
  std::optional<std::vector<std::string>> command_after_dashes;
  for (int i = 2; is_submit && i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      command_after_dashes.emplace(argv + i + 1, argv + argc);
      parse_argc = i;
      break;
    }
  }

  bool json = wants_json(argc, argv);
  try {
    app.parse(parse_argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success))
      return app.exit(e);
    std::string msg = e.what();
    // CLI11's own words, in cq's: a bare `cq`, a flag given twice, `cq node bogus`.
    if (argc == 1) {
      fmt::print(stderr, "{}", app.help());
      return 2;
    }
    if (auto at = msg.find(": At Most 1 required but received "); at != std::string::npos)
      msg = fmt::format(
          "{}: given {} times; give it once", msg.substr(0, at),
          msg.substr(at + std::string_view(": At Most 1 required but received ").size()));
    else if (msg == "A subcommand is required")
      msg = "name a command (cq --help lists them)";
    auto* cmd = subcommand_named(app, argv[1]); // argc > 1 from here
    if (argv[1][0] != '-' && !cmd) {
      msg = fmt::format("unknown command '{}'", argv[1]);
      if (auto near = nearest_name(argv[1], subcommand_names(app)); !near.empty())
        msg += fmt::format("; did you mean 'cq {}'?", near);
    } else if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
      if (auto w = argc > 2 && cmd ? unknown_subcommand(argv[1], argv[2], subcommand_names(*cmd))
                                   : std::string();
          !w.empty())
        msg = w;
      else
        for (int i = 2; i < parse_argc; ++i)
          if (auto ours = command_habit(argv[1], argv[i]); !ours.empty()) {
            msg = fmt::format("cq {} has no {}: use {}", argv[1], argv[i], ours);
            break;
          } else if (auto near = dash_hint(cmd, argv[i]); !near.empty()) {
            msg = fmt::format("cq {} has no {}: did you mean {}?", argv[1], argv[i], near);
            break;
          }
    }
    return report_error(
        {cq::errc::invalid_argument, fmt::format("{} (see cq {}--help)", msg,
                                                 cmd ? std::string(argv[1]) + " " : std::string())},
        json);
  }
  if (is_submit) {
    auto* c = ran(sub) ? sub : runc;
    if (auto e = take_command(
            argv[1], c->remaining(), std::move(command_after_dashes),
            [c](std::string_view w) { return dash_hint(c, w); }, given.argv))
      return report_error(*e, json);
  }

  if (op_id)
    set_operation_id(*op_id);
  try {
    if (ran(sub))
      return run_submit(submit);
    if (ran(runc))
      return run_run(run);
    if (ran(ls)) {
      if (ls_watch || ls_interval) {
        std::string why;
        auto ms = cq::parse_duration_ms(ls_interval.value_or("2s"), why);
        if (!ms || *ms < 100)
          return report_error({cq::errc::invalid_argument,
                               fmt::format("--interval: {}", ms ? "at least 100ms" : why)},
                              lso.json);
        lso.watch_ms = *ms;
      }
      return run_ls(lso);
    }
    if (ran(show))
      return run_show(show_job, show_json, show_verbose);
    if (ran(retry))
      return run_retry(retry_job, retry_json, retry_quiet);
    if (ran(whoami))
      return run_whoami(whoami_json);
    if (ran(clean))
      return run_clean(clean_older, clean_dry, clean_json);
    if (ran(completion)) {
      auto script = completion_script(app, completion_shell);
      if (script.empty())
        return report_error(
            {cq::errc::invalid_argument, fmt::format("completion: '{}' is not bash, zsh or fish",
                                                     completion_shell.substr(0, 32))},
            false);
      fmt::print("{}", script);
      return 0;
    }
    if (ran(preempt))
      return run_preempt(preempt_job, preempt_json);
    if (ran(ev))
      return run_events(events);
    if (ran(lg)) {
      return run_logs(logs);
    }
    if (ran(cancel)) {
      auto& f = cancel_o.filter;
      if (op_id &&
          (cancel_o.jobs.size() > 1 || f.mine || f.name || f.owner || f.node || !f.states.empty()))
        return report_error({cq::errc::invalid_argument,
                             "--operation-id: makes the cancel of one job idempotent; give one "
                             "job and no filter"},
                            cancel_o.json);
      return run_cancel(cancel_o);
    }
    if (ran(mv))
      return run_move(move);
    if (ran(wait))
      return run_wait(wait_jobs, wait_timeout, wait_json);
    if (ran(invite))
      return run_node_invite(invite_name, invite_replace, invite_json);
    if (ran(approve))
      return run_node_approve(approve_name, approve_json);
    if (ran(node_ls) || (ran(node) && node->get_subcommands().empty()))
      return run_node_ls(node_ls_json);
    if (ran(clear))
      return run_node_clear_fault(clear_name, clear_reason, clear_json);
    if (ran(hold))
      return run_hold(hold_jobs, false, hold_json);
    if (ran(release)) {
      if (release_hold.empty() == release_jobs.empty())
        return report_error({cq::errc::invalid_argument,
                             "release: name the jobs cq hold kept (cq release JOB...) or a node's "
                             "hold (cq release --hold ID), one of the two"},
                            release_json);
      if (!release_jobs.empty())
        return run_hold(release_jobs, true, release_json);
      return run_release(release_hold, release_json);
    }
    if (ran(enable))
      return run_node_enable(enable_name, enable_json);
    if (ran(disable))
      return run_node_disable(disable_name, disable_reason, disable_json);
    if (ran(diag))
      return run_node_diagnostic(diag_node, diag_job, diag_reason, diag_json);
    if (ran(token_add))
      return run_token_add(token_name, token_role, token_add_json);
    if (ran(token_ls))
      return run_token_ls(token_ls_json);
    if (ran(token_revoke))
      return run_token_revoke(revoke_name, token_revoke_json);
    if (ran(auditc))
      return run_audit(audit);
    if (ran(loginc))
      return run_login(login);
    if (ran(profile_ls) || (ran(profile) && profile->get_subcommands().empty()))
      return run_profile_ls(profile_ls_json);
    if (ran(profile_rm))
      return run_profile_rm(profile_rm_key, profile_rm_json);
    if (ran(upc)) {
      up.port_given = upc->count("--port") > 0;
      return run_up(up);
    }
    if (ran(down))
      return run_down(down_state);
  } catch (const std::exception& e) {
    return report_error({cq::errc::internal, e.what()}, json);
  }
  return report_error({cq::errc::internal, "no command ran"}, json);
}
