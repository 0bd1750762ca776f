#pragma once
// `cq completion bash|zsh|fish`: a completion script generated from the
// command tree, so it never lists a command or flag that cq does not have.

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>

namespace cq::cli {

/// The completion script for `shell` (bash, zsh or fish); "" for another.
std::string completion_script(const CLI::App& app, std::string_view shell);

} // namespace cq::cli
