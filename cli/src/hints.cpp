// What cq says to a mistyped command or a habit from another queue.
#include "hints.hpp"
#include "commands.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <utility>

namespace cq::cli {

namespace {

/// Edit distance (insertions, deletions, substitutions, and a swap of two
/// neighbours: `lgos` is one edit from `logs`), for "did you mean".
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

} // namespace

std::string nearest_name(std::string_view typed, const std::vector<std::string>& names) {
  std::string best;
  std::size_t best_d = 3;
  for (const auto& name : names)
    if (auto d = edit_distance(typed, name); d < best_d)
      best_d = d, best = name;
  return best;
}

/// What an option of Slurm (sbatch, srun) or pueue means in cq, for a
/// submit that used one: "" when `flag` is none of them.
std::string habit_hint(std::string_view flag) {
  static const std::pair<std::string_view, std::string_view> table[] = {
      {"--mem", "--ram SIZE"},
      {"--mem-per-cpu", "--ram SIZE (the whole job's cap)"},
      {"-J", "--name NAME"},
      {"--job-name", "--name NAME"},
      {"-t", "--timeout DURATION"},
      {"--time", "--timeout DURATION"},
      {"-d", "--after JOB"},
      {"--dependency", "--after JOB"},
      {"--gres", "--gpus N"},
      {"-G", "--gpus N"},
      {"-c", "--cpus N"},
      {"--cpus-per-task", "--cpus N"},
      {"-w", "--node NAME"},
      {"--nodelist", "--node NAME"},
      {"-p", "--priority LEVEL or --node NAME (cq has no partitions)"},
      {"--partition", "--priority LEVEL or --node NAME (cq has no partitions)"},
      {"-a", "--array SPEC"},
      {"--after-any", "--after JOB (cq waits for success)"},
      {"-o", "--output PATTERN"},
      {"-e", "--output PATTERN (stdout and stderr go to one file)"},
      {"--error", "--output PATTERN (stdout and stderr go to one file)"},
  };
  auto name = flag.substr(0, flag.find('='));
  for (auto& [theirs, ours] : table)
    if (name == theirs)
      return std::string(ours);
  return {};
}

std::string unknown_subcommand(std::string_view cmd, std::string_view typed,
                               const std::vector<std::string>& commands) {
  if (commands.empty() || typed.empty() || typed.front() == '-' ||
      std::find(commands.begin(), commands.end(), typed) != commands.end())
    return {};
  auto msg = fmt::format("cq {} has no command '{}'", cmd, typed);
  if (auto near = nearest_name(typed, commands); !near.empty())
    return msg + fmt::format("; did you mean 'cq {} {}'?", cmd, near);
  return msg + fmt::format("; its commands: {}", fmt::join(commands, ", "));
}

std::string command_habit(std::string_view cmd, std::string_view flag) {
  if (cmd == "cancel" && (flag == "--all" || flag == "-a"))
    return "--mine for every live job of yours, --state live for everyone's (as an operator)";
  return {};
}

} // namespace cq::cli

namespace cq::cli {

std::optional<bus::error_info>
take_command(std::string_view cmd, std::vector<std::string> rest,
             std::optional<std::vector<std::string>> after_dashes,
             const std::function<std::string(std::string_view)>& suggest,
             std::vector<std::string>& argv) {
  if (!rest.empty() && rest.front().starts_with("-")) {
    const auto& flag = rest.front();
    std::string msg;
    if (auto ours = habit_hint(flag); !ours.empty()) // a habit from Slurm or pueue
      msg = fmt::format("cq {} has no {}: use {}", cmd, flag, ours);
    else if (auto near = suggest(flag); !near.empty())
      msg = fmt::format("cq {} has no {}: did you mean {}?", cmd, flag, near);
    else if (cmd == "run" && (flag == "--array" || flag == "--from" || flag == "--json" ||
                              flag == "--hold-for-node"))
      msg = fmt::format("cq run has no {}: it runs one job and follows it (cq submit {} queues "
                        "without following)",
                        flag, flag);
    else
      msg = fmt::format("cq {} has no option {}; the job's command comes after the options: cq {} "
                        "[OPTIONS] [--] PROGRAM ARGS...",
                        cmd, flag, cmd);
    return bus::error_info{errc::invalid_argument, msg + fmt::format(" (see cq {} --help)", cmd)};
  }
  if (after_dashes) {
    if (!rest.empty())
      return bus::error_info{errc::invalid_argument,
                             fmt::format("'{}' comes before `--`, where only options go (quote an "
                                         "option's value that has a space), and the job's command "
                                         "after it",
                                         rest.front())};
    rest = std::move(*after_dashes);
  }
  argv = std::move(rest);
  return std::nullopt;
}

bus::error_info in_flag_words(bus::error_info e) {
  // The coordinator names the spec's fields, as the protocol does; a person
  // typed flags. The first word of its message is the field.
  static const std::pair<std::string_view, std::string_view> fields[] = {
      {"argv", "the command"},
      {"job_id", "--job-id"},
      {"after", "--after"},
      {"name", "--name"},
      {"ram_bytes", "--ram"},
      {"node", "--node"},
      {"priority", "--priority"},
      {"gpus", "--gpus"},
      {"vram_bytes", "--vram"},
      {"cpus", "--cpus"},
      {"est_ms", "--est"},
      {"timeout_ms", "--timeout"},
      {"profile", "--profile"},
      {"ram_floor_bytes", "--ram-floor"},
      {"ram_start_min_bytes", "--ram-start-min"},
      {"preempt", "--preempt"},
      {"lease_ms", "--lease"},
      {"lost_after_ms", "--lost-after"},
      {"retry_oom", "--retry-oom"},
      {"output", "--output"},
      {"cwd", "--cwd"},
      {"env", "--env"},
      {"array_indexes", "--array"},
      {"array_limit", "--array"},
      {"array_argvs", "--from"},
  };
  auto& m = e.message;
  auto colon = m.find(": ");
  if (colon == std::string::npos)
    return e;
  auto field = std::string_view(m).substr(0, colon);
  std::string words;
  if (field.starts_with("argv[") && field.ends_with("]")) { // argv[0]: the command's word 1
    std::uint64_t i = 0;
    auto digits = field.substr(5, field.size() - 6);
    if (std::from_chars(digits.data(), digits.data() + digits.size(), i).ec == std::errc())
      words = fmt::format("the command's word {}", i + 1);
  } else if (field.starts_with("env.")) {
    words = fmt::format("--env {}", field.substr(4));
  } else {
    for (auto& [f, flag] : fields)
      if (field == f)
        words = flag;
  }
  if (!words.empty())
    m = words + m.substr(colon);
  return e;
}

} // namespace cq::cli
