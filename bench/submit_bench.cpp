#include "submit_bench.hpp"

#include "coordinator.hpp"
#include "processes.hpp"

#include "cq/bus/client.hpp"
#include "cq/bus/codec.hpp"

#include <fmt/format.h>
#include <zmq.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>

namespace cq::bench {

spread_of::spread_of(std::vector<double> v) {
  if (v.empty())
    return;
  median = percentile(v, 50);
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  min = *lo, max = *hi;
}

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

/// What `cq submit` sends from a login shell: 30 variables, about 1.5 KB
/// (the CLI passes the caller's whole environment).
bus::env_map login_env() {
  bus::env_map env = {
      {"PATH", "/home/ana/.local/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"},
      {"HOME", "/home/ana"},
      {"USER", "ana"},
      {"LOGNAME", "ana"},
      {"SHELL", "/bin/bash"},
      {"LANG", "en_US.UTF-8"},
      {"TERM", "xterm-256color"},
      {"PWD", "/home/ana/src/experiments"},
      {"OLDPWD", "/home/ana"},
      {"SHLVL", "2"},
      {"EDITOR", "vim"},
      {"PAGER", "less"},
      {"LESS", "-R"},
      {"XDG_RUNTIME_DIR", "/run/user/1000"},
      {"XDG_SESSION_ID", "42"},
      {"XDG_SESSION_TYPE", "tty"},
      {"SSH_CONNECTION", "10.0.0.23 53122 10.0.0.5 22"},
      {"SSH_CLIENT", "10.0.0.23 53122 22"},
      {"SSH_TTY", "/dev/pts/3"},
      {"MAIL", "/var/mail/ana"},
      {"VIRTUAL_ENV", "/home/ana/.venvs/torch"},
      {"CUDA_HOME", "/usr/local/cuda"},
      {"LD_LIBRARY_PATH", "/usr/local/cuda/lib64"},
      {"PYTHONPATH", "/home/ana/src/experiments/lib"},
      {"WANDB_PROJECT", "ablations"},
      {"HF_HOME", "/data/hf-cache"},
      {"OMP_NUM_THREADS", "8"},
      {"_", "/usr/bin/cq"}};
  env["LS_COLORS"] = "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01:"
                     "cd=40;33;01:or=40;31;01:mi=00:su=37;41:sg=30;43:ca=00:tw=30;42:ow=34;42:"
                     "st=37;44:ex=01;32:*.tar=01;31:*.tgz=01;31:*.zip=01;31:*.gz=01;31:"
                     "*.bz2=01;31:*.xz=01;31:*.zst=01;31:*.jpg=01;35:*.png=01;35:*.mp4=01;35:";
  env["HISTCONTROL"] = "ignoreboth";
  return env;
}

/// SPEC section 11's memory figures: a 3 KB environment (a login shell's
/// and a long variable such as a conda or module system leaves).
bus::env_map three_kb_env() {
  auto env = login_env();
  std::size_t bytes = 0;
  for (auto& [k, v] : env)
    bytes += k.size() + v.size() + 2;
  env["MODULEPATH"] = std::string(3072 - std::min<std::size_t>(bytes + 12, 3072), 'm');
  return env;
}

bus::submit_req sample_job(int i, bool big_env = false) {
  static const bus::env_map env = login_env();
  static const bus::env_map big = three_kb_env();
  bus::submit_req r;
  r.spec.name = fmt::format("bench-{}", i);
  r.spec.argv = {"true"};
  r.spec.cwd = "/";
  r.spec.env = big_env ? big : env;
  return r;
}

/// One client, one request at a time: submits/s, and each acknowledgement's latency.
double one_at_a_time(const coordinator& co, int n, std::vector<double>& ack_ms,
                     bool local = false) {
  bus::client c(local ? "unix://" + co.local_socket() : co.endpoint, co.token,
                std::chrono::milliseconds(10000), co.curve);
  auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) {
    auto a = clock_type::now();
    auto r = c.call<bus::submit_rep>(sample_job(i));
    if (!r)
      throw std::runtime_error("submit failed: " + r.error().message);
    ack_ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - a).count());
  }
  return n / std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// One array submit of `n` tasks (cq submit --array, or with `from`, --from
/// FILE: a command of its own per task, each sized by its own profile): every
/// task committed in one transaction. Jobs/s from the request to the reply.
double one_array(const coordinator& co, int n, bool from = false) {
  bus::client c(co.endpoint, co.token, std::chrono::milliseconds(120000), co.curve);
  auto r = sample_job(0);
  r.job_id = "0b7d3f2a-9c1e-4e55-9a10-6c2d8e4f7a01"; // a fresh store per run
  std::vector<std::uint64_t> indexes(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < indexes.size(); ++i)
    indexes[i] = i;
  r.array_indexes = std::move(indexes);
  if (from) {
    r.array_argvs.emplace();
    for (int i = 0; i < n; ++i)
      r.array_argvs->push_back({"python3", "train.py", "--lr", fmt::format("0.{:04}", i)});
  }
  auto t0 = clock_type::now();
  auto rep = c.call<bus::submit_rep>(r);
  if (!rep)
    throw std::runtime_error("array submit failed: " + rep.error().message);
  return n / std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// `clients` threads, each with its own DEALER socket and up to `window`
/// requests in flight: submits/s over all of them. The requests are encoded
/// before the clock starts: on a small machine the clients share the
/// coordinator's cores, and the figure is the coordinator's.
double pipelined(const coordinator& co, int clients, int n_each, int window, bool big_env = false) {
  zmq::context_t ctx(1);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  std::vector<std::vector<std::string>> frames(static_cast<std::size_t>(clients));
  for (int c = 0; c < clients; ++c)
    for (int i = 0; i < n_each; ++i)
      frames[static_cast<std::size_t>(c)].push_back(bus::encode_request(
          static_cast<std::uint64_t>(i + 1), co.token, sample_job(c * n_each + i, big_env)));
  auto t0 = clock_type::now();
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      zmq::socket_t s(ctx, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      if (co.curve) {
        s.set(zmq::sockopt::curve_serverkey, co.curve->server_key);
        s.set(zmq::sockopt::curve_publickey, co.curve->own.public_key);
        s.set(zmq::sockopt::curve_secretkey, co.curve->own.secret_key);
      }
      s.connect(co.endpoint);
      int sent = 0, acked = 0;
      while (acked < n_each) {
        while (sent < n_each && sent - acked < window) {
          auto& bytes = frames[static_cast<std::size_t>(c)][static_cast<std::size_t>(sent)];
          s.send(zmq::buffer(bytes), zmq::send_flags::none);
          ++sent;
        }
        zmq::message_t m;
        if (!s.recv(m, zmq::recv_flags::none))
          continue;
        std::uint64_t seen = 0;
        auto f = bus::decode_frame(m.to_string_view(), seen);
        if (!f || !f->ok)
          ++failures;
        ++acked;
      }
    });
  for (auto& t : threads)
    t.join();
  if (failures)
    throw std::runtime_error(fmt::format("{} pipelined submits failed", failures.load()));
  return clients * n_each / std::chrono::duration<double>(clock_type::now() - t0).count();
}

} // namespace

namespace {

/// The environment of a `cq` process that talks to `co` (a config dir with
/// its token, as `cq up` leaves one).
std::vector<std::string> cq_env(const coordinator& co) {
  auto cfg = co.dir / "cli";
  fs::create_directories(cfg);
  // cq refuses a token file that group or others may read.
  if (int fd = ::open((cfg / "token").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600); fd >= 0) {
    [[maybe_unused]] auto n = ::write(fd, co.token.data(), co.token.size());
    ::close(fd);
  }
  // Configured as `cq up` leaves it: the endpoint, and its Unix socket.
  std::ofstream(cfg / "url") << co.endpoint << "\n";
  std::ofstream(cfg / "local") << "unix://" << co.local_socket() << "\n" << co.endpoint << "\n";
  return {"CQ_CONFIG_DIR=" + cfg.string(), "HOME=" + co.dir.string(), "PATH=/usr/bin:/bin"};
}

/// Wall time of one whole `cq ARGS...` process (its output discarded), in ms.
double time_cq(const coordinator& co, std::vector<std::string> args) {
  args.insert(args.begin(), self_dir() + "/cq");
  return time_process(args, cq_env(co));
}

/// 5 runs of `f`.
template <class F>
spread_of five_runs(F f) {
  std::vector<double> v;
  for (int i = 0; i < 5; ++i)
    v.push_back(f());
  return spread_of(std::move(v));
}

} // namespace

std::vector<scale_result> bench_scale(int jobs_small, int jobs_large) {
  std::vector<scale_result> out;
  coordinator co;
  int stored = 0;
  auto fill_to = [&](int n) {
    // 8 pipelined clients, as in the submit figure, 3 KB environments.
    pipelined(co, 8, (n - stored) / 8, 64, true);
    stored += ((n - stored) / 8) * 8;
  };
  for (int n : {jobs_small, jobs_large}) {
    fill_to(n);
    // SPEC section 11's bounds are for 10k and 100k jobs (not --quick's sizes).
    double rss_bound = stored == 10'000 ? 50 : stored == 100'000 ? 300 : 0;
    out.push_back({fmt::format("coordinator RSS with {} queued jobs (3 KB env each)", stored),
                   static_cast<double>(rss_kb(co.pid)) / 1024.0, "MB", rss_bound});
    auto ls = five_runs([&] { return time_cq(co, {"ls"}); });
    auto page = five_runs([&] { return time_cq(co, {"ls", "--limit", "100"}); });
    auto json = five_runs([&] { return time_cq(co, {"ls", "--json"}); });
    // Right after 15 listings (5 of them --json, every job's whole record, in
    // pages of up to limits::page_bytes): their transients are still held
    // until the allocator returns its free pages (every 2 s, docs/adr/0033).
    out.push_back({fmt::format("coordinator RSS right after 15 listings of them, {} jobs", stored),
                   static_cast<double>(rss_kb(co.pid)) / 1024.0, "MB"});
    // The same once it returned its free memory: what it holds for the jobs.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    out.push_back({fmt::format("coordinator RSS with {} queued jobs, settled", stored),
                   static_cast<double>(rss_kb(co.pid)) / 1024.0, "MB", rss_bound});
    out.push_back(ls.figure({fmt::format("cq ls with {} jobs, whole process (median of 5)", stored),
                             0, "ms", stored == 10'000 ? 30.0 : 0.0}));
    out.push_back(json.figure(
        {fmt::format("cq ls --json with {} jobs, whole process (median of 5)", stored), 0, "ms"}));
    // Issue 20: the first page (a terminal's 100 rows) of 100k in 30 ms.
    out.push_back(page.figure(
        {fmt::format("cq ls --limit 100 with {} jobs, whole process (median of 5)", stored), 0,
         "ms", stored == 100'000 ? 30.0 : 0.0}));
  }
  // SPEC section 11: acknowledgement latency with 100k jobs stored (500 more
  // submits, one at a time, on the full store).
  std::vector<double> ack;
  one_at_a_time(co, 500, ack);
  bool spec_size = stored == 100'000; // the SPEC's bounds hold at 100k (not --quick's)
  out.push_back({fmt::format("submit ack latency p50, {} jobs stored", stored), percentile(ack, 50),
                 "ms", spec_size ? 0.5 : 0.0});
  out.push_back({fmt::format("submit ack latency p99, {} jobs stored", stored), percentile(ack, 99),
                 "ms", spec_size ? 2.0 : 0.0});
  stored += 500;
  // The same through the local socket (ADR 0047), as this machine's cq sends.
  std::vector<double> local_ack;
  one_at_a_time(co, 500, local_ack, true);
  out.push_back({fmt::format("submit ack latency p50, {} jobs stored, local socket", stored),
                 percentile(local_ack, 50), "ms", spec_size ? 0.5 : 0.0});
  out.push_back({fmt::format("submit ack latency p99, {} jobs stored, local socket", stored),
                 percentile(local_ack, 99), "ms", spec_size ? 2.0 : 0.0});
  stored += 500;
  co.kill9();
  out.push_back({fmt::format("coordinator restart to serving, {} jobs in the store", stored),
                 co.spawn(), "ms", spec_size ? 500.0 : 0.0});
  out.push_back({fmt::format("coordinator RSS after the restart, {} jobs", stored),
                 static_cast<double>(rss_kb(co.pid)) / 1024.0, "MB", spec_size ? 300.0 : 0.0});
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  out.push_back({fmt::format("coordinator RSS after the restart, {} jobs, settled", stored),
                 static_cast<double>(rss_kb(co.pid)) / 1024.0, "MB", spec_size ? 300.0 : 0.0});
  // The first restart above follows a kill -9 under load; these follow one
  // at rest (its spread says how much one restart moves on this machine).
  std::vector<double> again;
  for (int i = 0; i < 3; ++i) {
    co.kill9();
    again.push_back(co.spawn());
  }
  std::sort(again.begin(), again.end());
  scale_result r{fmt::format("coordinator restart at rest, {} jobs (median of 3)", stored),
                 again[1], "ms"};
  r.min = again.front(), r.max = again.back();
  out.push_back(r);
  return out;
}

std::vector<rate_result> bench_submits(int runs, int n, bool curve) {
  std::string suffix = curve ? ", CurveZMQ" : "";
  // SPEC section 11's targets.
  rate_result one{"durable submits/s, 1 client, one request at a time" + suffix, {}, 3000};
  rate_result eight{"durable submits/s, 8 pipelined clients" + suffix, {}, 50000};
  auto tasks = std::min<int>(5 * n, static_cast<int>(bus::limits::array_tasks));
  rate_result array{
      fmt::format("jobs/s, one array submit of {} tasks{}", tasks, suffix), {}, 20000};
  rate_result from{
      fmt::format("jobs/s, one --from submit of {} commands{}", tasks, suffix), {}, 20000};
  // The same over the coordinator's local socket (ADR 0047), as this
  // machine's `cq` sends it; never encrypted.
  rate_result local{"durable submits/s, 1 client, one at a time, local socket", {}, 3000};
  std::vector<double> ack, local_ack;
  for (int r = 0; r < runs; ++r) {
    coordinator co(curve); // a fresh store each run: the figure is not a function of earlier runs
    one.per_run.push_back(one_at_a_time(co, n, ack));
    if (!curve) {
      coordinator fresh_local(false);
      local.per_run.push_back(one_at_a_time(fresh_local, n, local_ack, true));
    }
    eight.per_run.push_back(pipelined(co, 8, n, 64));
    coordinator fresh(curve);
    array.per_run.push_back(one_array(fresh, tasks));
    coordinator fresh_from(curve);
    from.per_run.push_back(one_array(fresh_from, tasks, true));
  }
  one.ack_p50_ms = percentile(ack, 50);
  one.ack_p99_ms = percentile(ack, 99);
  if (curve)
    return {one, eight, array, from};
  local.ack_p50_ms = percentile(local_ack, 50);
  local.ack_p99_ms = percentile(local_ack, 99);
  return {one, local, eight, array, from};
}

namespace {

/// `n` whole `cq submit -- true` processes on a local node until the last
/// one finished, then `cq ls --all` of them: the drain side by side with
/// task-spooler's.
/// The median time to create (and close) an empty file in a new directory
/// under /tmp, where the drains keep their state, in microseconds; 0 when
/// none can be made. A job on a local node makes about ten inodes. On ext4
/// without a journal each creation skips the inodes of its block group
/// deleted in the last minutes, one by one (docs/operations.md, "What a
/// trivial job costs the node"): tens of microseconds on a quiet file
/// system, hundreds after a large deletion.
double file_create_us() {
  char tmpl[] = "/tmp/cq-bench-files-XXXXXX";
  if (!::mkdtemp(tmpl))
    return 0;
  std::vector<double> us;
  for (int i = 0; i < 200; ++i) {
    auto file = fmt::format("{}/f{}", tmpl, i);
    auto t0 = clock_type::now();
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
      break;
    ::close(fd);
    us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  return percentile(std::move(us), 50);
}

/// Runs `m` whole `argv` processes, one after another.
void repeat(int m, const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  for (int i = 0; i < m; ++i)
    time_process(argv, env);
}

/// One side of a comparison in turns (a VM's speed drifts within minutes):
/// its total time and each round's rate.
struct turns {
  double secs = 0;
  std::vector<double> rates;
  /// Times `round`, which handles `m` jobs.
  template <class F>
  void run(int m, F round) {
    auto t0 = clock_type::now();
    round();
    auto s = std::chrono::duration<double>(clock_type::now() - t0).count();
    secs += s;
    rates.push_back(m / s);
  }
  /// `n` jobs' rate in all, with the rounds' spread.
  scale_result figure(std::string name, int n, double target = 0, bool at_least = false) const {
    scale_result r{std::move(name), n / secs, "jobs/s", target, at_least};
    spread_of s(rates);
    r.min = s.min, r.max = s.max;
    return r;
  }
};

/// The drain, side by side with task-spooler's when `ts` is given: `n`
/// whole `cq submit -- true` processes to a local node until the last one
/// finished, and as many `tsp true` until `tsp -w` returns, taking turns a
/// fifth of the jobs at a time (a VM's speed drifts within minutes); then
/// `cq ls --all` of them, and an array's drain. tsp's figure goes to
/// `tsp_drain`.
void bench_drain(int n, tsp_server* ts, std::vector<scale_result>& out,
                 std::optional<scale_result>& tsp_drain, std::optional<spread_of>& tsp_listed) {
  out.push_back({"a new file in /tmp, created and closed (median of 200)", file_create_us(), "us"});
  try {
    local_up up;
    // What both daemons hold, idle and once the jobs are drained (finished
    // jobs stay in the api's memory for the history window, ADR 0031),
    // beside task-spooler's server.
    auto daemons_mb = [&] {
      return static_cast<double>(rss_kb(up.pid_of("coordinator")) + rss_kb(up.pid_of("node"))) /
             1024.0;
    };
    double idle_mb = daemons_mb(), tsp_idle_mb = ts ? ts->server_rss_mb() : -1;
    constexpr int rounds = 5;
    turns cq, tsp;
    for (int r = 0; r < rounds; ++r) {
      int m = n / rounds + (r < n % rounds ? 1 : 0);
      cq.run(m, [&] {
        repeat(m, {up.bin, "submit", "--ram", "64M", "--", "true"}, up.env);
        up.wait_drained(std::chrono::minutes(10), "the jobs did not finish within 10 minutes");
      });
      if (ts)
        tsp.run(m, [&] {
          repeat(m, {ts->bin, "true"}, ts->env);
          time_process({ts->bin, "-w"}, ts->env); // until the last one ran
        });
    }
    out.push_back(cq.figure(
        fmt::format("cq submit and drain of {} true jobs on a local node ({} rounds beside tsp's)",
                    n, rounds),
        n, ts ? n / tsp.secs : 0, true));
    if (ts)
      tsp_drain =
          tsp.figure(fmt::format("task-spooler: submit and drain of {} true jobs (in turns with "
                                 "cq's)",
                                 n),
                     n);
    out.push_back({"cq's daemons' RSS (coordinator and node), idle", idle_mb, "MB"});
    out.push_back({fmt::format("cq's daemons' RSS after the {} jobs", n), daemons_mb(), "MB"});
    if (ts) {
      out.push_back({"task-spooler: its server's RSS, idle", tsp_idle_mb, "MB"});
      out.push_back({fmt::format("task-spooler: its server's RSS after the {} jobs", n),
                     ts->server_rss_mb(), "MB"});
    }
    std::vector<double> listed, tsp_l; // in turns with `tsp -l`, as the loops
    for (int i = 0; i < 5; ++i)
      if (listed.push_back(time_process({up.bin, "ls", "--all"}, up.env)); ts)
        tsp_l.push_back(time_process({ts->bin, "-l"}, ts->env));
    out.push_back(spread_of(listed).figure(
        {fmt::format("cq ls --all with {} finished jobs, whole process (median of 5{})", n,
                     ts ? ", in turns with tsp -l" : ""),
         0, "ms"}));
    if (ts)
      tsp_listed.emplace(std::move(tsp_l));
    // The node's side alone: the same jobs as one array, so no `cq` process
    // runs beside the drain (task-spooler has no arrays: no side by side).
    auto t1 = clock_type::now();
    time_process(
        {up.bin, "submit", "-q", "--ram", "64M", "--array", fmt::format("1-{}", n), "--", "true"},
        up.env);
    up.wait_drained(std::chrono::minutes(10), "the array did not finish within 10 minutes");
    out.push_back({fmt::format("drain of an array of {} true tasks on a local node", n),
                   n / std::chrono::duration<double>(clock_type::now() - t1).count(), "jobs/s"});
  } catch (const std::exception& e) {
    out.push_back({fmt::format("cq drain not measured: {}", e.what()), 0, ""});
  }
}

} // namespace

std::vector<scale_result> bench_cli(int n) {
  std::vector<scale_result> out;
  auto tsp = find_tsp();
  std::optional<scale_result> tsp_loop;
  {
    coordinator co;
    auto env = cq_env(co);
    auto bin = self_dir() + "/cq";
    // The shell loops of cq and of tsp take turns, a tenth of the jobs each,
    // so that a machine whose speed drifts within minutes (a shared VM) moves
    // both alike; each figure's spread is its rounds'. SPEC section 11's
    // target is tsp's figure.
    constexpr int rounds = 10;
    std::optional<tsp_server> ts;
    if (!tsp.empty())
      ts.emplace(tsp, n + 10);
    turns cq, tsp;
    for (int r = 0; r < rounds; ++r) {
      int m = n / rounds + (r < n % rounds ? 1 : 0);
      cq.run(m, [&] { repeat(m, {bin, "submit", "--hold-for-node", "--", "true"}, env); });
      if (!ts)
        continue;
      tsp.run(m, [&] { repeat(m, {ts->bin, "true"}, ts->env); });
      time_process({ts->bin, "-w"}, ts->env); // its jobs do not run into cq's turn
    }
    out.push_back(
        cq.figure(fmt::format("cq submit in a shell loop, whole processes ({} jobs, {} rounds "
                              "beside tsp's)",
                              n, rounds),
                  n, ts ? n / tsp.secs : 0, true));
    if (ts)
      tsp_loop = tsp.figure(
          fmt::format("task-spooler: tsp in the same loop ({} jobs, in turns with cq's)", n), n);
    out.push_back(
        five_runs([&] {
          return time_process({bin, "ls"}, env);
        })
            .figure({fmt::format("cq ls with {} queued jobs, whole process (median of 5)", n), 0,
                     "ms"}));
    // Issue 20: 50 people submitting at once lose no throughput against
    // one: 50 loops side by side, the same number of whole processes.
    constexpr int people = 50;
    auto each = std::max(1, n / people);
    std::atomic<int> failed{0};
    auto t1 = clock_type::now();
    std::vector<std::thread> loops;
    for (int p = 0; p < people; ++p)
      loops.emplace_back([&] {
        for (int i = 0; i < each; ++i)
          try {
            time_process({bin, "submit", "--hold-for-node", "--", "true"}, env);
          } catch (const std::exception&) {
            ++failed;
          }
      });
    for (auto& t : loops)
      t.join();
    auto all = std::chrono::duration<double>(clock_type::now() - t1).count();
    if (failed)
      throw std::runtime_error(fmt::format("{} of the concurrent submits failed", failed.load()));
    out.push_back({fmt::format("cq submit from {} shell loops at once, whole processes, in all "
                               "({} jobs)",
                               people, people * each),
                   people * each / all, "jobs/s", out[0].value, true});
    // Cancelling a whole array is one command: its requests are pipelined,
    // so the tasks' cancels commit together (it was one commit each).
    const std::string array = "00000000-0000-4000-8000-00000000c0de";
    time_process({bin, "submit", "-q", "--hold-for-node", "--job-id", array, "--array",
                  fmt::format("1-{}", n), "--", "true"},
                 env);
    out.push_back({fmt::format("cq cancel of an array of {} queued tasks, whole process", n),
                   time_process({bin, "cancel", array}, env), "ms"});
  }
  // The drain's comparison: a fresh server, whose finished jobs `tsp -l`
  // then lists.
  std::optional<tsp_server> ts;
  if (!tsp.empty())
    ts.emplace(tsp, n + 10);
  std::optional<scale_result> tsp_drain;
  std::optional<spread_of> tsp_listed;
  auto before_drain = out.size();
  bench_drain(n, ts ? &*ts : nullptr, out, tsp_drain, tsp_listed);
  // The drain's listing, when the drain was measured: its target is tsp -l.
  auto cq_listed = std::find_if(out.begin() + static_cast<std::ptrdiff_t>(before_drain), out.end(),
                                [](auto& r) { return r.figure.starts_with("cq ls --all with"); });
  if (!ts) {
    out.push_back(
        {"task-spooler not installed (apt install task-spooler): no side by side", 0, ""});
    return out;
  }
  auto listed = tsp_listed ? *tsp_listed : five_runs([&] {
    return time_process({ts->bin, "-l"}, ts->env);
  });
  out[1].target = listed.median; // at most tsp -l
  if (cq_listed != out.end())
    cq_listed->target = listed.median;
  if (tsp_loop)
    out.push_back(*tsp_loop);
  if (tsp_drain)
    out.push_back(*tsp_drain);
  out.push_back(listed.figure(
      {fmt::format("task-spooler: tsp -l with {} finished jobs (median of 5)", n), 0, "ms"}));
  return out;
}

} // namespace cq::bench
