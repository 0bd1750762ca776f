#pragma once
// Human output helpers shared by the commands.

#include "cq/bus/protocol.hpp"

#include <string>
#include <vector>

namespace cq::cli {

/// A text table printed with every column left-aligned to its widest cell
/// (widths count bytes; names are expected to be ASCII).
struct text_table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;

  /// Writes the header and the rows to stdout, columns separated by two blanks.
  void print() const;
};

/// "5m" for a time `at_ms` in the past; "-" when `at_ms` is 0 (not yet).
std::string age_since(std::int64_t at_ms, std::int64_t now_ms);

/// The outcome column of a job or allocation: the reason, and/or the exit
/// code or signal ("exit 3", "oom (signal 9)"); "-" when there is none yet.
std::string outcome(const std::string& reason, const std::optional<std::int64_t>& exit_code,
                    const std::optional<std::int64_t>& signal);

/// `argv` joined with blanks, each element quoted for a POSIX shell if needed.
std::string shell_join(const std::vector<std::string>& argv);

/// Writes `s` to stdout as raw bytes.
void write_stdout(std::string_view s);

} // namespace cq::cli
