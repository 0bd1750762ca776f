// The tables of the human views: cells kept in one buffer (cell_grid) and
// drawn to a width (render_grid).
#include "render_detail.hpp"

#include <algorithm>

namespace cq::cli::render_detail {

void cell_grid::reserve(std::size_t rows, std::size_t row_bytes) {
  text_.reserve(rows * row_bytes);
  begin_.reserve(rows * columns_);
  size_.reserve(rows * columns_);
  width_.reserve(rows * columns_);
}

void cell_grid::close() {
  std::size_t begin = begin_.empty() ? 0 : begin_.back() + size_.back();
  std::string_view cell = std::string_view(text_).substr(begin);
  bool plain = printable_ascii(cell);
  std::size_t width = cell.size(); // printable ASCII: one column a byte
  if (!plain) {
    auto escaped = escape_control(cell);
    width = display_width(escaped);
    text_.resize(begin);
    text_ += escaped;
  }
  begin_.push_back(static_cast<std::uint32_t>(begin));
  size_.push_back(static_cast<std::uint32_t>(text_.size() - begin));
  width_.push_back(static_cast<std::uint32_t>(width));
}

void cell_grid::cut_column(std::size_t c, std::size_t bytes, std::size_t from) {
  for (auto i = from * columns_ + c; i < size_.size(); i += columns_)
    if (size_[i] > bytes)
      size_[i] = width_[i] = static_cast<std::uint32_t>(bytes);
}

std::string render_grid(const cell_grid& grid, const std::vector<std::size_t>& min_width,
                        const std::vector<std::string_view>& row_colour, std::size_t colour_column,
                        const render_style& style) {
  auto n = grid.columns();
  auto rows = grid.rows();
  std::vector<std::size_t> w(n, 0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < n; ++i)
      w[i] = std::max(w[i], grid.width(r, i));
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
  out.reserve(rows * (total() + 1));
  for (std::size_t r = 0; r < rows; ++r) {
    auto line = out.size();
    for (std::size_t i = 0; i < n; ++i) {
      auto cell = grid.cell(r, i);
      auto cw = grid.width(r, i);
      std::string clipped; // only for a cell wider than its column
      if (cw > w[i]) {
        clipped = clip(std::string(cell), w[i]);
        cw = display_width(clipped);
        cell = clipped;
      }
      std::string_view sgr = r > 0 && i == colour_column ? row_colour[r - 1] : std::string_view();
      append_painted(out, cell, sgr, style.colour);
      out.append(i + 1 < n ? w[i] - cw + 2 : 0, ' ');
    }
    while (out.size() > line && out.back() == ' ')
      out.pop_back();
    out += '\n';
  }
  return out;
}

std::string table::render(const render_style& style) const {
  auto n = header.size();
  cell_grid grid(n);
  auto add_row = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < n; ++i)
      grid.add(i < cells.size() ? std::string_view(cells[i]) : std::string_view());
  };
  add_row(header);
  for (const auto& r : rows)
    add_row(r);
  std::vector<std::string_view> colours(row_colour.begin(), row_colour.end());
  colours.resize(rows.size());
  return render_grid(grid, min_width, colours, colour_column, style);
}

} // namespace cq::cli::render_detail
