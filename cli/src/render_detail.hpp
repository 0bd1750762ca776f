#pragma once
// The pieces of the CLI's views that render.cpp (cq ls) and render_show.cpp
// (cq show) share: an implementation detail of cli/src.

#include "cq/bus/protocol.hpp"
#include "cq/cli/escape.hpp"
#include "cq/cli/render.hpp"
#include "cq/units.hpp"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace cq::cli::render_detail {

using bus::job_state;

int level_rank(const std::string& p);
std::string_view state_colour(job_state s);
std::string paint(std::string text, std::string_view sgr, bool colour);
std::string clip(const std::string& s, std::size_t width);
std::string reason_words(bus::reason r);
std::string outcome_words(const bus::job_info& j, bool cap = true);
std::vector<std::string> wrap(const std::string& text, std::size_t width);
std::string elapsed(const bus::job_info& j, std::int64_t now);
std::string local_clock(std::int64_t ms, const char* format);

/// A table whose columns shrink, flexible ones first, to fit a width.
struct table {
  std::vector<std::string> header;
  std::vector<std::size_t> min_width; ///< per column: never cut below
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row_colour; ///< per row: SGR of the colour column
  std::size_t colour_column = SIZE_MAX;

  /// The table as text; escapes the rows' cells in place (call it once).
  std::string render(const render_style& style) {
    auto n = header.size();
    // Each cell's escape and width once: most cells are plain ASCII, kept as
    // they are (a listing of 10,000 jobs has 60,000 of them).
    auto plain = [](const std::string& c) {
      return std::all_of(c.begin(), c.end(), [](char ch) {
        auto u = static_cast<unsigned char>(ch);
        return u >= 0x20 && u < 0x7f;
      });
    };
    std::vector<std::size_t> widths; // row-major, n per row, rows after the header
    widths.reserve((rows.size() + 1) * n);
    std::vector<std::size_t> w(n, 0);
    auto measure = [&](std::vector<std::string>& r) {
      for (std::size_t i = 0; i < n; ++i) {
        std::size_t cw = 0;
        if (i < r.size()) {
          if (plain(r[i])) {
            cw = r[i].size(); // printable ASCII: one column a byte
          } else {
            r[i] = escape_control(r[i]);
            cw = display_width(r[i]);
          }
        }
        widths.push_back(cw);
        w[i] = std::max(w[i], cw);
      }
    };
    measure(header);
    for (auto& r : rows)
      measure(r);
    auto total = [&] {
      std::size_t t = 2 * (n - 1);
      for (auto x : w)
        t += x;
      return t;
    };
    // Over the width: take from the widest column that can still give.
    while (style.width && total() > style.width) {
      std::size_t best = n;
      for (std::size_t i = 0; i < n; ++i)
        if (w[i] > min_width[i] && (best == n || w[i] > w[best]))
          best = i;
      if (best == n)
        break;
      --w[best];
    }
    static const std::string empty;
    std::string out;
    std::string line;
    for (std::size_t r = 0; r <= rows.size(); ++r) {
      const auto& cells = r == 0 ? header : rows[r - 1];
      line.clear();
      for (std::size_t i = 0; i < n; ++i) {
        const auto& raw = i < cells.size() ? cells[i] : empty;
        auto cw = widths[r * n + i];
        std::string clipped; // only for a cell wider than its column
        bool cut = cw > w[i];
        if (cut) {
          clipped = clip(raw, w[i]);
          cw = display_width(clipped);
        }
        const auto& cell = cut ? clipped : raw;
        if (r > 0 && i == colour_column)
          line += paint(cell, row_colour[r - 1], style.colour);
        else
          line += cell;
        line.append(i + 1 < n ? w[i] - cw + 2 : 0, ' ');
      }
      while (!line.empty() && line.back() == ' ')
        line.pop_back();
      out += line;
      out += '\n';
    }
    return out;
  }
};

} // namespace cq::cli::render_detail
