#include "cq/units.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <array>
#include <cctype>
#include <charconv>
#include <limits>
#include <string>
#include <utility>

namespace cq {

namespace {

bool is_blank(char c) {
  return c == ' ' || c == '\t';
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// The power of 1024 that a unit spelling stands for, or -1 if unknown.
int unit_exponent(std::string_view unit) {
  auto u = lower(unit);
  if (u.empty() || u == "b")
    return 0;
  static constexpr std::array<char, 4> letters = {'k', 'm', 'g', 't'};
  for (std::size_t i = 0; i < letters.size(); ++i) {
    auto l = std::string(1, letters[i]);
    if (u == l || u == l + "b" || u == l + "i" || u == l + "ib")
      return static_cast<int>(i) + 1;
  }
  return -1;
}

} // namespace

std::optional<std::uint64_t> parse_size(std::string_view text, std::string& error) {
  while (!text.empty() && is_blank(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back()))
    text.remove_suffix(1);
  if (text.empty()) {
    error = "size is empty";
    return std::nullopt;
  }
  if (text.front() == '-') {
    error = fmt::format("size '{}' is negative", text);
    return std::nullopt;
  }
  // The number: digits, optionally a point and more digits. Anything else
  // (signs, exponents, "nan", "inf") is refused here, so no floating point
  // parser can let NaN or infinity through.
  std::size_t i = 0;
  unsigned __int128 whole = 0;
  std::size_t whole_digits = 0;
  constexpr unsigned __int128 max_bytes = std::numeric_limits<std::uint64_t>::max();
  bool overflow = false;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
       ++i, ++whole_digits) {
    whole = whole * 10 + static_cast<unsigned>(text[i] - '0');
    if (whole > max_bytes)
      overflow = true, whole = max_bytes + 1;
  }
  // Up to 18 fraction digits are kept (exact in 128 bits); further ones cannot
  // change a byte count below 2^64 by a whole byte at these multipliers.
  unsigned __int128 frac = 0, frac_den = 1;
  std::size_t frac_digits = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
         ++i, ++frac_digits) {
      if (frac_digits < 18) {
        frac = frac * 10 + static_cast<unsigned>(text[i] - '0');
        frac_den *= 10;
      }
    }
  }
  if (whole_digits + frac_digits == 0) {
    error = fmt::format("size '{}' is not a number (expected e.g. 512M, 1.5G, 4096)", text);
    return std::nullopt;
  }
  auto unit = text.substr(i);
  while (!unit.empty() && is_blank(unit.front()))
    unit.remove_prefix(1);
  auto exp = unit_exponent(unit);
  if (exp < 0) {
    error = fmt::format("size '{}' has an unknown unit '{}' (use B, K, M, G or T; binary units)",
                        text, unit);
    return std::nullopt;
  }
  unsigned __int128 mult = static_cast<unsigned __int128>(1) << (10 * exp);
  auto bytes = overflow ? max_bytes + 1 : whole * mult + frac * mult / frac_den;
  if (bytes > max_bytes) {
    error = fmt::format("size '{}' is too large", text);
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(bytes);
}

std::optional<std::uint64_t> parse_duration_ms(std::string_view text, std::string& error) {
  while (!text.empty() && is_blank(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back()))
    text.remove_suffix(1);
  if (text.empty()) {
    error = "duration is empty";
    return std::nullopt;
  }
  if (text.front() == '-') {
    error = fmt::format("duration '{}' is negative", text);
    return std::nullopt;
  }
  auto not_a_duration = [&] {
    error = fmt::format(
        "duration '{}' is not a duration (expected seconds such as 90 or 1.5, or parts such as "
        "500ms, 90s, 10m, 2h, 1d, 1h30m)",
        text);
    return std::nullopt;
  };
  // Units in milliseconds, in the order of the bit that marks them as seen.
  static constexpr std::array<std::pair<std::string_view, std::uint64_t>, 5> units = {{
      {"ms", 1},
      {"s", 1000},
      {"m", 60'000},
      {"h", 3'600'000},
      {"d", 86'400'000},
  }};
  constexpr unsigned __int128 max_ms = std::numeric_limits<std::uint64_t>::max();
  unsigned __int128 total = 0;
  unsigned seen = 0;
  std::size_t parts = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    while (parts > 0 && i < text.size() && is_blank(text[i]))
      ++i;
    // The number, as in parse_size: digits, optionally a point and more
    // digits; no signs, exponents, "nan" or "inf".
    auto start = i;
    unsigned __int128 whole = 0;
    std::size_t digits = 0;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++digits) {
      whole = whole * 10 + static_cast<unsigned>(text[i] - '0');
      if (whole > max_ms)
        whole = max_ms + 1;
    }
    unsigned __int128 frac = 0, frac_den = 1;
    if (i < text.size() && text[i] == '.') {
      ++i;
      for (std::size_t n = 0; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
           ++i, ++digits, ++n) {
        if (n < 18) {
          frac = frac * 10 + static_cast<unsigned>(text[i] - '0');
          frac_den *= 10;
        }
      }
    }
    if (digits == 0)
      return not_a_duration();
    auto number = text.substr(start, i - start);
    while (i < text.size() && is_blank(text[i]))
      ++i;
    auto unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i])))
      ++i;
    auto unit = lower(text.substr(unit_start, i - unit_start));
    std::uint64_t mult = 0;
    if (unit.empty()) {
      // A bare number is seconds, but only as the whole text: "1h30" is unclear.
      if (parts > 0 || i < text.size()) {
        error = fmt::format(
            "duration '{}' has a number without a unit ('{}'); use ms, s, m, h or d", text, number);
        return std::nullopt;
      }
      mult = 1000;
    } else {
      std::size_t u = 0;
      while (u < units.size() && units[u].first != unit)
        ++u;
      if (u == units.size()) {
        error = fmt::format("duration '{}' has an unknown unit '{}' (use ms, s, m, h or d)", text,
                            text.substr(unit_start, i - unit_start));
        return std::nullopt;
      }
      if (seen & (1u << u)) {
        error = fmt::format("duration '{}' gives the unit '{}' twice", text, unit);
        return std::nullopt;
      }
      seen |= 1u << u;
      mult = units[u].second;
    }
    total += whole * mult + frac * mult / frac_den;
    if (total > max_ms)
      total = max_ms + 1;
    ++parts;
  }
  if (total > max_ms) {
    error = fmt::format("duration '{}' is too long", text);
    return std::nullopt;
  }
  if (total == 0) {
    error = fmt::format("duration '{}' is zero (it must be at least 1ms)", text);
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(total);
}

std::string format_duration_ms(std::uint64_t ms) {
  std::string out;
  append_duration_ms(out, ms);
  return out;
}

void append_duration_ms(std::string& out, std::uint64_t ms) {
  // Numbers by to_chars: a listing formats one per row, and fmt's parse of
  // the format string was most of the cost.
  auto number = [&](std::uint64_t n) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, n);
    out.append(buf, end);
  };
  if (ms < 1000) {
    if (ms == 0) {
      out += "0s";
    } else {
      number(ms);
      out += "ms";
    }
    return;
  }
  static constexpr std::array<std::pair<const char*, std::uint64_t>, 4> units = {{
      {"d", 86'400},
      {"h", 3'600},
      {"m", 60},
      {"s", 1},
  }};
  auto s = ms / 1000;
  int shown = 0;
  for (const auto& [name, secs] : units) {
    auto n = s / secs;
    s %= secs;
    if (n == 0) {
      if (shown > 0)
        break; // "1h" and not "1h0m"; "2d" rather than "2d0h3m"
      continue;
    }
    number(n);
    out += name;
    if (++shown == 2)
      break;
  }
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 6> units = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024)
    return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < units.size()) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string format_age(std::int64_t ms) {
  if (ms < 0)
    ms = 0;
  auto s = ms / 1000;
  if (s < 60)
    return fmt::format("{}s", s);
  if (s < 3600)
    return fmt::format("{}m", s / 60);
  if (s < 48 * 3600)
    return fmt::format("{}h", s / 3600);
  return fmt::format("{}d", s / 86400);
}

namespace {

/// A whole decimal number, all of `text`.
std::optional<std::uint64_t> whole(std::string_view text) {
  if (text.empty() || text.size() > 18)
    return std::nullopt;
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

} // namespace

std::optional<array_spec> parse_array(std::string_view text, std::size_t max_tasks,
                                      std::string& error) {
  constexpr std::uint64_t max_index = 1'000'000'000;
  array_spec out;
  auto list = text;
  if (auto pct = text.find('%'); pct != std::string_view::npos) {
    list = text.substr(0, pct);
    auto n = whole(text.substr(pct + 1));
    if (!n || *n == 0) {
      error = fmt::format("'{}' after % is not a whole number of tasks of at least 1",
                          text.substr(pct + 1));
      return std::nullopt;
    }
    out.limit = n;
  }
  if (list.empty()) {
    error = "no indexes (write 0-99, 1,3,5 or 0-99:2, then %N to run at most N at once)";
    return std::nullopt;
  }
  while (!list.empty()) {
    auto comma = list.find(',');
    auto part = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    std::uint64_t step = 1;
    if (auto colon = part.find(':'); colon != std::string_view::npos) {
      auto st = whole(part.substr(colon + 1));
      if (!st || *st == 0) {
        error = fmt::format("'{}': the step after : must be a whole number of at least 1", part);
        return std::nullopt;
      }
      step = *st;
      part = part.substr(0, colon);
    }
    auto dash = part.find('-');
    auto lo = whole(part.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : whole(part.substr(dash + 1));
    if (lo && hi && *hi < *lo) {
      error = fmt::format("'{}' is a range that goes down: write it {}-{}", part, *hi, *lo);
      return std::nullopt;
    }
    if (!lo || !hi) {
      error = fmt::format("'{}' is not an index or a range FIRST-LAST", part);
      return std::nullopt;
    }
    if (*hi > max_index) {
      error = fmt::format("{} is over the largest index, {}", *hi, max_index);
      return std::nullopt;
    }
    for (auto i = *lo; i <= *hi; i += step) {
      if (out.indexes.size() >= max_tasks) {
        error = fmt::format("more than {} tasks", max_tasks);
        return std::nullopt;
      }
      out.indexes.push_back(i);
    }
  }
  auto sorted = out.indexes;
  std::sort(sorted.begin(), sorted.end());
  if (auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end()) {
    error = fmt::format("index {} is given twice", *d);
    return std::nullopt;
  }
  return out;
}

} // namespace cq
