#pragma once
// Human output helpers shared by the commands. Everything a command prints
// for a person goes through text_table::print(), print_line(), report_error()
// or, for text it escaped itself, write_stdout(); see cq/cli/escape.hpp.

#include "cq/bus/protocol.hpp"
#include "cq/cli/render.hpp"

#include <string>
#include <vector>

namespace cq::cli {

/// A text table printed with every column left-aligned to its widest cell.
/// print() passes every header and cell through escape_control() (so a cell
/// never spans lines or reaches the terminal as a control sequence); widths
/// count code points of the escaped text.
struct text_table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  /// The column that gives way (its cells cut, ending in "…") so that the
  /// table fits sys::terminal_width(); none when npos.
  std::size_t flex = static_cast<std::size_t>(-1);

  /// Writes the header and the rows to stdout, columns separated by two blanks.
  void print() const;
};

/// "5m" for a time `at_ms` in the past; "-" when `at_ms` is 0 (not yet).
std::string age_since(std::int64_t at_ms, std::int64_t now_ms);

/// For cq wait and cq logs -f: says on stderr why a queued job waits, once
/// per change of its reasons (`said` keeps what was said last); a change of
/// the estimated start alone is not one.
void tell_waiting(const bus::show_rep& rep, std::string& said);

/// Writes `s` to stdout as raw bytes (for a job's own output, or text that
/// was already escaped).
void write_stdout(std::string_view s);

/// Writes `line` to stdout through escape_control(), then a newline: the way
/// every one-line human reply is printed.
void print_line(std::string_view line);

/// A whole number of `what` (lines, rows) that `flag` was given as `text`:
/// 0 or more, or a refusal naming the flag.
bus::result<std::uint64_t> count_of(std::string_view flag, const std::string& text,
                                    std::string_view what);

/// Writes a note for the person (text already escaped) to stderr: wrapped at
/// blanks to the terminal's width, continued lines indented two blanks; on
/// one line when stderr is not a terminal (a log, a pipe: one line to grep).
void tell(const std::string& text);

} // namespace cq::cli
