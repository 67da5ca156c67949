// Charts of the diagnosis commands as SVG (`headroom bench --plot`, `headroom probe --plot`):
// panels stacked vertically, each with axes from zero, ticks, a legend and its series.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hr {

struct ChartSeries {
  enum class Style : uint8_t { LINE = 0, DASHED, DOTS, MARKS };  // MARKS: a short bar per point
  std::string name;                                              // in the legend
  std::vector<std::pair<double, double>> points;                 // (x, y)
  Style style = Style::LINE;
};

struct ChartPanel {
  std::string title;    // "allocator level: bytes held over time"
  std::string x_label;  // "seconds since the mode started"
  std::string y_label;  // "GiB"
  std::vector<ChartSeries> series;
  // When set, x values are indices into these and the ticks carry the names (modes).
  std::vector<std::string> x_categories;
  // Text written above the x axis at these x values ("out of memory in node 3").
  std::vector<std::pair<double, std::string>> notes;
};

// The document; series take colours from one palette by their index in the panel.
std::string chart_svg(const std::string& title, const std::vector<ChartPanel>& panels);

}  // namespace hr
