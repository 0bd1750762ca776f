#pragma once
// The pieces of the CLI's views that render.cpp (cq ls) and render_show.cpp
// (cq show) share: an implementation detail of cli/src.

#include "cq/bus/protocol.hpp"
#include "cq/cli/escape.hpp"
#include "cq/cli/render.hpp"
#include "cq/units.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cq::cli::render_detail {

using bus::job_state;

int level_rank(const std::string& p);
std::string_view state_colour(job_state s);
std::string paint(std::string text, std::string_view sgr, bool colour);
/// paint() appended to `out`.
void append_painted(std::string& out, std::string_view text, std::string_view sgr, bool colour);
std::string clip(const std::string& s, std::size_t width);
std::string reason_words(bus::reason r);
std::string outcome_words(const bus::job_info& j, bool cap = true);
/// The ELAPSED column of cq ls for `j` ("-" when it has not started),
/// appended to `out`.
void append_elapsed(std::string& out, const bus::job_info& j, std::int64_t now);
std::string local_clock(std::int64_t ms, const char* format);

/// A table's cells in one buffer, row by row, `columns` to a row (a header
/// is a row like any other): a listing of 10,000 jobs costs no string per
/// cell. Each cell is escaped (escape_control) and measured as it is closed.
class cell_grid {
public:
  explicit cell_grid(std::size_t columns) : columns_(columns) {}

  /// Room for `rows` rows of about `row_bytes` bytes.
  void reserve(std::size_t rows, std::size_t row_bytes);
  /// The buffer the next cell's bytes are appended to; close() ends the cell.
  std::string& text() { return text_; }
  /// Ends the cell appended since the last one ended: escapes it unless it is
  /// printable ASCII, and measures it.
  void close();
  void add(std::string_view cell) {
    text_ += cell;
    close();
  }
  /// Every cell of column `c` in rows `from` on keeps its first `bytes` bytes
  /// (for cells of ASCII only, as ids are). Called once the last cell is
  /// added: a cell added after it would start inside a cut one.
  void cut_column(std::size_t c, std::size_t bytes, std::size_t from);

  std::size_t columns() const { return columns_; }
  std::size_t rows() const { return width_.size() / columns_; }
  std::string_view cell(std::size_t r, std::size_t c) const {
    auto i = r * columns_ + c;
    return std::string_view(text_).substr(begin_[i], size_[i]);
  }
  std::size_t width(std::size_t r, std::size_t c) const { return width_[r * columns_ + c]; }

private:
  std::size_t columns_;
  std::string text_;
  std::vector<std::uint32_t> begin_; ///< per cell: where it starts in text_
  std::vector<std::uint32_t> size_;  ///< per cell: its bytes
  std::vector<std::uint32_t> width_; ///< per cell: its display columns
};

/// `grid` (its first row the header) as text, two blanks between columns,
/// each column at its widest cell; while over `style.width`, the widest
/// column above its `min_width` gives a column, cut cells ending in "…".
/// The cells of `colour_column` in row r (r >= 1) are painted `row_colour[r - 1]`.
std::string render_grid(const cell_grid& grid, const std::vector<std::size_t>& min_width,
                        const std::vector<std::string_view>& row_colour, std::size_t colour_column,
                        const render_style& style);

/// A table whose columns shrink, flexible ones first, to fit a width.
struct table {
  std::vector<std::string> header;
  std::vector<std::size_t> min_width; ///< per column: never cut below
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row_colour; ///< per row: SGR of the colour column
  std::size_t colour_column = SIZE_MAX;

  /// The table as text (render_grid of its cells, escaped).
  std::string render(const render_style& style) const;
};

} // namespace cq::cli::render_detail
