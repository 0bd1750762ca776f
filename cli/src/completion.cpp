#include "completion.hpp"

#include <fmt/format.h>

#include <vector>

namespace cq::cli {
namespace {

/// One command of the tree: its path ("" for cq, "node ls"), subcommands
/// and flags.
struct command_node {
  std::string path;
  std::vector<std::pair<std::string, std::string>> subs;  ///< name, description
  std::vector<std::pair<std::string, std::string>> flags; ///< --long or -s, description
};

void walk(const CLI::App& app, const std::string& path, std::vector<command_node>& out) {
  command_node n;
  n.path = path;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    n.subs.emplace_back(sub->get_name(), sub->get_description());
  for (const auto* opt : app.get_options()) {
    if (opt->get_positional())
      continue;
    for (const auto& l : opt->get_lnames())
      n.flags.emplace_back("--" + l, opt->get_description());
    for (const auto& s : opt->get_snames())
      n.flags.emplace_back("-" + s, opt->get_description());
  }
  out.push_back(n);
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    walk(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), out);
}

/// `s` inside single quotes for a shell.
std::string sh_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string words(const command_node& n) {
  std::string w;
  for (const auto& [name, _] : n.subs)
    w += (w.empty() ? "" : " ") + name;
  for (const auto& [flag, _] : n.flags)
    w += (w.empty() ? "" : " ") + flag;
  return w;
}

std::string bash(const std::vector<command_node>& tree) {
  std::string cases;
  std::string known;
  for (const auto& n : tree) {
    cases += fmt::format("    {}) words={} ;;\n", sh_quote(n.path), sh_quote(words(n)));
    if (!n.path.empty())
      known += (known.empty() ? "" : "|") + sh_quote(n.path);
  }
  return fmt::format(R"(# cq completion for bash: source <(cq completion bash)
_cq() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} path="" next i words
  for ((i = 1; i < COMP_CWORD; i++)); do
    # After `--` comes the job's command: complete files and programs.
    [[ ${{COMP_WORDS[i]}} == -- ]] && {{ COMPREPLY=(); return 0; }}
    [[ ${{COMP_WORDS[i]}} == -* ]] && continue
    next=${{path:+$path }}${{COMP_WORDS[i]}}
    case "$next" in
      {}) path=$next ;;
    esac
  done
  case "$path" in
{}    *) words="" ;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _cq cq
)",
                     known, cases);
}

std::string fish(const std::vector<command_node>& tree) {
  std::string out = "# cq completion for fish: cq completion fish | source\ncomplete -c cq -e\n";
  for (const auto& n : tree) {
    // The condition that this command (and no deeper one) was typed.
    std::string cond;
    if (n.path.empty()) {
      cond = "__fish_use_subcommand";
    } else {
      std::string last = n.path.substr(n.path.rfind(' ') + 1);
      cond = fmt::format("__fish_seen_subcommand_from {}", last);
      if (n.path.find(' ') != std::string::npos)
        cond = fmt::format("__fish_seen_subcommand_from {}; and {}",
                           n.path.substr(0, n.path.find(' ')), cond);
    }
    for (const auto& [name, desc] : n.subs)
      out += fmt::format("complete -c cq -f -n {} -a {} -d {}\n", sh_quote(cond), sh_quote(name),
                         sh_quote(desc.substr(0, 60)));
    for (const auto& [flag, desc] : n.flags) {
      auto opt = flag.starts_with("--") ? "-l " + sh_quote(flag.substr(2)) : "-s " + flag.substr(1);
      out += fmt::format("complete -c cq -n {} {} -d {}\n",
                         sh_quote(n.path.empty() ? "__fish_use_subcommand" : cond), opt,
                         sh_quote(desc.substr(0, 60)));
    }
  }
  return out;
}

} // namespace

std::string completion_script(const CLI::App& app, std::string_view shell) {
  std::vector<command_node> tree;
  walk(app, "", tree);
  if (shell == "bash")
    return bash(tree);
  if (shell == "zsh")
    return "# cq completion for zsh: source <(cq completion zsh)\n"
           "autoload -U +X bashcompinit && bashcompinit\n" +
           bash(tree);
  if (shell == "fish")
    return fish(tree);
  return {};
}

} // namespace cq::cli
