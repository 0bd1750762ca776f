#pragma once
// Parsing and printing of the quantities the CLI shows to people: sizes in
// binary units, durations and short ages. Pure functions, no I/O (unit-tested).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cq {

/// Parses a size in binary units: a non-negative decimal number (an integer or
/// a fraction such as `1.5`), optionally followed by a unit: `B`, `K`, `M`,
/// `G`, `T`, each also spelled `KB`/`KiB` etc., case-insensitive, with optional
/// blanks between number and unit. Every unit is a power of 1024 (`G` = 2^30
/// bytes; the SPEC gives sizes in binary units only). A fraction of a byte is
/// rounded down.
/// On success returns the number of bytes. On failure returns nullopt and sets
/// `error` to a sentence saying what is wrong (empty, negative, not a number,
/// NaN/inf, unknown unit, more than 2^64-1 bytes); the caller names the field.
std::optional<std::uint64_t> parse_size(std::string_view text, std::string& error);

/// Parses a duration into milliseconds: a plain non-negative number of seconds
/// (`90`, `1.5`), or one or more parts each made of a number and a unit, `ms`,
/// `s`, `m` (minutes), `h` or `d`, case-insensitive, optionally separated by
/// blanks: `500ms`, `90s`, `10m`, `1h30m`, `1d 2h`. A number may have a
/// fraction (`1.5h`); a fraction of a millisecond is rounded down. Each unit
/// may appear once.
/// On success returns the number of milliseconds (at least 1). On failure
/// returns nullopt and sets `error` to a sentence saying what is wrong (empty,
/// negative, not a number, NaN/inf, unknown unit, a part without a unit, a
/// repeated unit, zero, more than 2^64-1 ms); the caller names the field.
std::optional<std::uint64_t> parse_duration_ms(std::string_view text, std::string& error);

/// Formats a duration for people with its two largest non-zero units:
/// "500ms", "45s", "10m", "1h30m", "2d3h" (truncated below one second once the
/// duration is a second or longer). Prints "0s" for 0.
std::string format_duration_ms(std::uint64_t ms);
/// format_duration_ms appended to `out` (a listing's rows without a string each).
void append_duration_ms(std::string& out, std::uint64_t ms);

/// Formats `bytes` for people with one decimal in the largest binary unit that
/// keeps the number at least 1: "512 B", "1.5 KiB", "31.2 GiB".
std::string format_bytes(std::uint64_t bytes);

/// Formats a duration in milliseconds as a short age: "12s", "3m", "2h", "5d"
/// (truncated; seconds below 60, minutes below 60, hours below 48). A negative
/// duration (clock skew between machines) prints as "0s".
std::string format_age(std::int64_t ms);

/// An array's indexes and limit, as `cq submit --array` takes them.
struct array_spec {
  std::vector<std::uint64_t> indexes;
  std::optional<std::uint64_t> limit; ///< %N: at most N tasks at once
};

/// Parses Slurm's --array syntax: comma-separated indexes and ranges
/// ("0-99", "1,3,5-7", "0-99:2" every second), then an optional "%N".
/// At most `max_tasks` indexes, each at most 1e9, none twice. Returns
/// nullopt and sets `error` to a sentence saying what is wrong.
std::optional<array_spec> parse_array(std::string_view text, std::size_t max_tasks,
                                      std::string& error);

} // namespace cq
