// cq submit --from FILE (- for stdin): many jobs in one call.
//
// Every line that is a command (run through sh -c; blank lines and #
// comments skipped) becomes a task of one array, in one commit, each sized
// by its own profile; --array %N limits how many run at once. When a line
// holds a JSON object instead (it starts with '{'), every line is a job of
// its own: the object's keys are cq submit's long options without their
// dashes ("ram": "8G", "gpus": 1, "after": ["prep"], "env": {"K": "V"},
// "no-requeue": true), with "command" (a list: the argv) or "shell" (a line
// for sh -c); the options given on the command line are the defaults each
// line overrides, and a plain command line among them is {"shell": LINE}.
// Every line is checked before any is sent, and a refusal names its line
// and key. Those jobs are sent one after another over one connection.
#include "commands.hpp"
#include "cq/cli/escape.hpp"
#include "cq/json.hpp"
#include "cq/units.hpp"
#include "output.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace cq::cli {

namespace {

bus::error_info bad(std::string why) {
  return bus::error_info{errc::invalid_argument, "--from: " + std::move(why)};
}

/// A line of FILE that counts, with its number (1-based).
struct line_t {
  std::size_t number = 0;
  std::string text; ///< without blanks around it
};

bus::result<std::vector<line_t>> read_lines(const std::string& from) {
  std::ifstream file_in;
  std::istream* in = &std::cin;
  if (from != "-") {
    file_in.open(from);
    if (!file_in)
      return bad(fmt::format("cannot read {}: {}", escape_control(from), std::strerror(errno)));
    in = &file_in;
  }
  std::vector<line_t> out;
  std::size_t number = 0;
  for (std::string line; std::getline(*in, line);) {
    ++number;
    auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#')
      continue;
    auto last = line.find_last_not_of(" \t\r");
    if (out.size() == bus::limits::array_tasks)
      return bad(fmt::format("more than {} jobs; split the file", bus::limits::array_tasks));
    out.push_back({number, line.substr(first, last - first + 1)});
  }
  if (out.empty())
    return bad(fmt::format("no command in {}", escape_control(from)));
  return out;
}

/// The text of a scalar option's value: a string, a whole number, or a
/// number with a fraction (for sizes such as 1.5); nullopt for anything else.
std::optional<std::string> scalar(const nlohmann::json& v) {
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_number_unsigned())
    return std::to_string(v.get<std::uint64_t>());
  if (v.is_number_integer())
    return std::to_string(v.get<std::int64_t>());
  if (v.is_number_float())
    return fmt::format("{}", v.get<double>());
  return std::nullopt;
}

/// Applies the JSON object of one line to `o` (the command line's options).
std::optional<std::string> apply_json(const nlohmann::json& j, submit_options& o) {
  if (!j.is_object())
    return "a line that starts with { must be one JSON object";
  using text_field = std::optional<std::string> submit_options::*;
  static const std::pair<std::string_view, text_field> texts[] = {
      {"name", &submit_options::name},
      {"ram", &submit_options::ram},
      {"priority", &submit_options::priority},
      {"gpus", &submit_options::gpus},
      {"vram", &submit_options::vram},
      {"cpus", &submit_options::cpus},
      {"est", &submit_options::est},
      {"timeout", &submit_options::timeout},
      {"profile", &submit_options::profile},
      {"ram-floor", &submit_options::ram_floor},
      {"ram-start-min", &submit_options::ram_start_min},
      {"preempt", &submit_options::preempt},
      {"lease", &submit_options::lease},
      {"lost-after", &submit_options::lost_after},
      {"retry-oom", &submit_options::retry_oom},
      {"output", &submit_options::output},
  };
  bool command = false;
  for (auto& [key, v] : j.items()) {
    auto t =
        std::find_if(std::begin(texts), std::end(texts), [&](auto& e) { return e.first == key; });
    if (t != std::end(texts)) {
      auto s = scalar(v);
      if (!s)
        return fmt::format("\"{}\": a string or a number", key);
      o.*(t->second) = *s;
    } else if (key == "node" || key == "cwd") {
      if (!v.is_string())
        return fmt::format("\"{}\": a string", key);
      (key == "node" ? o.node : o.cwd) = v.get<std::string>();
    } else if (key == "command") {
      if (!v.is_array() || v.empty() ||
          !std::all_of(v.begin(), v.end(), [](auto& a) { return a.is_string(); }))
        return "\"command\": a list of strings, the program first";
      o.argv = v.get<std::vector<std::string>>();
      o.shell.reset();
      command = true;
    } else if (key == "shell") {
      if (!v.is_string())
        return "\"shell\": a string, run through sh -c";
      o.shell = v.get<std::string>();
      o.argv.clear();
      command = true;
    } else if (key == "after") {
      if (v.is_string())
        o.after = {v.get<std::string>()};
      else if (v.is_array() &&
               std::all_of(v.begin(), v.end(), [](auto& a) { return a.is_string(); }))
        o.after = v.get<std::vector<std::string>>();
      else
        return "\"after\": a job (a string) or a list of jobs";
    } else if (key == "env") {
      if (!v.is_object())
        return "\"env\": an object of NAME: \"value\"";
      for (auto& [name, value] : v.items()) {
        if (!value.is_string())
          return fmt::format("\"env\": {}: a string", name);
        o.env.push_back(name + "=" + value.get<std::string>());
      }
    } else if (key == "no-requeue" || key == "hold-for-node" || key == "env-clear" ||
               key == "hold") {
      if (!v.is_boolean())
        return fmt::format("\"{}\": true or false", key);
      (key == "no-requeue"      ? o.no_requeue
       : key == "env-clear"     ? o.env_clear
       : key == "hold-for-node" ? o.hold_for_node
                                : o.hold) = v.get<bool>();
    } else {
      return fmt::format("unknown key \"{}\": the keys are cq submit's long options without "
                         "their dashes (\"ram\": \"8G\"), and \"command\" or \"shell\"",
                         escape_control(key.substr(0, 64)));
    }
  }
  if (!command)
    return "no \"command\" (a list: the program and its arguments) or \"shell\" (a line)";
  return std::nullopt;
}

/// Lines of commands: one array, in one commit.
int submit_array(const submit_options& o, std::vector<line_t> lines) {
  std::vector<bus::string_list> argvs;
  argvs.reserve(lines.size());
  for (auto& l : lines)
    argvs.push_back({"sh", "-c", std::move(l.text)});
  submit_options one = o;
  one.from.reset();
  one.array.reset();
  one.argv = argvs.front();
  if (!one.name) {
    // The tasks are named after the file: jobs.txt -> jobs-0, jobs-1, ...
    std::string stem = *o.from == "-" ? "stdin" : std::filesystem::path(*o.from).stem().string();
    std::erase_if(stem, [](char c) {
      return !std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-';
    });
    one.name = stem.empty() ? std::string("from") : stem.substr(0, 48);
  }
  std::optional<std::uint64_t> limit;
  if (o.array) {
    std::string why;
    auto a = parse_array("0" + *o.array, 1, why);
    if (!o.array->starts_with("%") || !a || !a->limit)
      return report_error(bus::error_info{errc::invalid_argument,
                                          "--array: with --from it takes "
                                          "only a limit, such as --array %4"},
                          o.json);
    limit = a->limit;
  }
  auto req = submit_request(one);
  if (!req)
    return report_error(req.error(), o.json);
  req->array_indexes.emplace(argvs.size());
  for (std::size_t i = 0; i < argvs.size(); ++i)
    (*req->array_indexes)[i] = i;
  req->array_limit = limit;
  req->array_argvs = std::move(argvs);
  return report_submitted(send_submit(*req), o);
}

/// Lines of JSON specs: each a job of its own, all checked before any is sent.
int submit_each(const submit_options& o, const std::vector<line_t>& lines) {
  if (o.array)
    return report_error(bad("--array: the jobs of JSON lines are jobs of their own, not one "
                            "array's tasks (give each line its own \"after\" to order them)"),
                        o.json);
  std::vector<bus::submit_req> reqs;
  reqs.reserve(lines.size());
  for (auto& l : lines) {
    submit_options one = o;
    one.from.reset();
    std::optional<std::string> why;
    if (l.text.front() == '{') {
      auto j = nlohmann::json::parse(l.text, nullptr, false);
      why = j.is_discarded() ? std::optional<std::string>("not valid JSON") : apply_json(j, one);
    } else {
      one.shell = l.text;
    }
    if (why)
      return report_error(bad(fmt::format("line {}: {}", l.number, *why)), o.json);
    auto req = submit_request(one);
    if (!req) {
      auto e = req.error();
      e.message = fmt::format("--from: line {}: {}", l.number, e.message);
      return report_error(e, o.json);
    }
    reqs.push_back(std::move(*req));
  }
  auto s = open_session();
  if (!s)
    return report_error(s.error(), o.json);
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    auto rep = s->call_retrying<bus::submit_rep>(reqs[i]);
    if (!rep) {
      auto e = in_flag_words(rep.error());
      e.message = fmt::format("--from: line {}: {} ({} of {} jobs submitted before it)",
                              lines[i].number, e.message, i, reqs.size());
      return report_error(e, o.json);
    }
    if (o.json)
      all.push_back(to_json(*rep));
    else
      print_line(rep->job.id);
  }
  if (o.json)
    fmt::print("{}\n", dump_json(all));
  else if (!o.quiet)
    fmt::print(stderr, "cq: {} job{} submitted\n", reqs.size(), reqs.size() == 1 ? "" : "s");
  return 0;
}

} // namespace

int run_submit_from(const submit_options& o) {
  if (o.shell || !o.argv.empty())
    return report_error(bad("the commands come from the file; give no other command"), o.json);
  auto lines = read_lines(*o.from);
  if (!lines)
    return report_error(lines.error(), o.json);
  bool specs = std::any_of(lines->begin(), lines->end(),
                           [](const line_t& l) { return l.text.front() == '{'; });
  return specs ? submit_each(o, *lines) : submit_array(o, std::move(*lines));
}

} // namespace cq::cli
