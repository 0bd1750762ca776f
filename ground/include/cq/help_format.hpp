#pragma once
// Every program's --help at 80 columns. CLI11's formatter prints each
// description on one line however long it is; this one wraps the
// descriptions of options and subcommands at blanks into the columns right
// of the names (CLI11 indents the lines after a newline to that column),
// and the program's own description and footer to the whole width. Only
// the programs' main.cpp files include it (it brings in CLI11).
#include "cq/text.hpp"

#include <CLI/CLI.hpp>

#include <memory>
#include <sstream>

namespace cq {

class help_formatter : public CLI::Formatter {
public:
  static constexpr std::size_t width = 80;
  static constexpr std::size_t names = 30; ///< the column descriptions start at

  help_formatter() { column_width(names); }

  std::string make_option_desc(const CLI::Option* opt) const override {
    return joined(CLI::Formatter::make_option_desc(opt), width - names);
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true),
                             joined(sub->get_description(), width - names), column_width_);
    return out.str();
  }
  std::string make_description(const CLI::App* app) const override {
    return joined(CLI::Formatter::make_description(app), width);
  }
  /// A command that passes the rest of its words on (CLI11's prefix_command:
  /// `cq submit`, `cq run`) says so in its usage line.
  std::string make_usage(const CLI::App* app, std::string name) const override {
    auto usage = CLI::Formatter::make_usage(app, std::move(name));
    if (app->get_prefix_command() && usage.ends_with('\n'))
      usage.insert(usage.size() - 1, " [--] PROGRAM ARGS...");
    return usage;
  }
  std::string make_footer(const CLI::App* app) const override {
    return joined(CLI::Formatter::make_footer(app), width);
  }

  /// `text` wrapped to `columns`, each of its own lines on its own.
  static std::string joined(const std::string& text, std::size_t columns) {
    std::string out;
    for (std::size_t at = 0;;) {
      auto nl = text.find('\n', at);
      auto parts = wrap_words(text.substr(at, nl == std::string::npos ? nl : nl - at), columns);
      for (std::size_t i = 0; i < parts.size(); ++i)
        out += (i ? "\n" : "") + parts[i];
      if (nl == std::string::npos)
        return out;
      out += '\n';
      at = nl + 1;
    }
  }
};

/// Makes `app` (and the subcommands added to it after) print its help so.
inline void use_help_format(CLI::App& app) {
  app.formatter(std::make_shared<help_formatter>());
}

} // namespace cq
