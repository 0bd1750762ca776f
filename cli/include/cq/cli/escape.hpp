#pragma once
// Making untrusted text safe to print on a terminal.
//
// Every field that `cq` prints for a person (job names, argv, cwd, reasons,
// node names, hold reasons, error messages from the network) comes from some
// other user or from the wire. Printed raw, an escape sequence in a job name
// would reach every `cq ls` reader's terminal (recolouring it, moving the
// cursor, rewriting earlier lines, setting the window title), and a newline
// would forge extra rows. Human output therefore passes through
// escape_control(); `--json` output is escaped by the JSON writer instead, and
// `cq logs` prints the job's own bytes unchanged.

#include "cq/text.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace cq::cli {

/// `s` with every byte that could act on a terminal made visible:
///  - C0 controls: `\t`, `\n`, `\r`, `\e` (ESC) for those four, `\xNN` (two
///    lowercase hex digits) for the other bytes below 0x20 and for DEL (0x7f);
///  - C1 controls (U+0080..U+009F, whose two-byte UTF-8 forms some terminals
///    obey like the 8-bit CSI/OSC bytes): each byte as `\xNN`;
///  - bytes that are not part of valid UTF-8 (stray continuation bytes,
///    truncated, overlong or surrogate sequences, values above U+10FFFF): each
///    byte as `\xNN`, so that a terminal never receives a partial sequence.
/// Everything else, valid multi-byte UTF-8 included, is copied unchanged. A
/// backslash is not doubled: names and commands with a literal backslash read
/// as written, at the price that `\n` in the output may also be a literal
/// backslash and `n`; `--json` gives the exact bytes.
/// The result is valid UTF-8 with no byte below 0x20 and no 0x7f, and
/// escaping it again changes nothing (so a message may be escaped where it is
/// built and again where it is printed).
std::string escape_control(std::string_view s);

/// True when every byte of `s` is printable ASCII (0x20..0x7e): what
/// escape_control() keeps as it is, one column a byte.
bool printable_ascii(std::string_view s);

/// Columns `s` takes on a terminal (cq/text.hpp): escape_control() returns
/// valid UTF-8, as it assumes.
using cq::display_width;

} // namespace cq::cli
