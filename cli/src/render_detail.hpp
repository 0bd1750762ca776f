#pragma once
// The pieces of the CLI's views that render.cpp (cq ls) and render_show.cpp
// (cq show) share: an implementation detail of cli/src.

#include "cq/bus/protocol.hpp"
#include "cq/cli/escape.hpp"
#include "cq/cli/render.hpp"
#include "cq/units.hpp"

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

  std::string render(const render_style& style) const {
    auto n = header.size();
    std::vector<std::vector<std::string>> cells;
    cells.push_back(header);
    for (const auto& r : rows) {
      std::vector<std::string> e;
      for (const auto& c : r)
        e.push_back(escape_control(c));
      cells.push_back(std::move(e));
    }
    std::vector<std::size_t> w(n, 0);
    for (const auto& r : cells)
      for (std::size_t i = 0; i < n && i < r.size(); ++i)
        w[i] = std::max(w[i], display_width(r[i]));
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
    std::string out;
    for (std::size_t r = 0; r < cells.size(); ++r) {
      std::string line;
      for (std::size_t i = 0; i < n; ++i) {
        auto cell = clip(i < cells[r].size() ? cells[r][i] : "", w[i]);
        auto pad = i + 1 < n ? w[i] - display_width(cell) + 2 : 0;
        if (r > 0 && i == colour_column)
          cell = paint(cell, row_colour[r - 1], style.colour);
        line += cell;
        line.append(pad, ' ');
      }
      while (!line.empty() && line.back() == ' ')
        line.pop_back();
      out += line + '\n';
    }
    return out;
  }
};

} // namespace cq::cli::render_detail
