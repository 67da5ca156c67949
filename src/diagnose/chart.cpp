// chart_svg: layout (panel boxes, axes, ticks, legend) over SvgDocument.
#include "diagnose/chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "diagnose/svg.h"

namespace hr {
namespace {

constexpr double kWidth = 900, kPanelHeight = 280, kTop = 40;
constexpr double kLeft = 80, kRight = 200, kPlotTop = 30, kPlotBottom = 50;
const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

const char* color_of(size_t i) { return kPalette[i % (sizeof kPalette / sizeof kPalette[0])]; }

// A step of 1, 2 or 5 times a power of ten giving about five ticks over [0, hi].
double tick_step(double hi) {
  if (!(hi > 0)) return 1;
  const double raw = hi / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string tick_label(double v, double step) {
  return step >= 1 ? fmt::format("{:.0f}", v)
                   : fmt::format("{:.{}f}", v, int(std::ceil(-std::log10(step))));
}

struct Range {
  double x0 = 0, x1 = 1, y1 = 1;
};

Range range_of(const ChartPanel& p) {
  Range r;
  bool any = false;
  double xmin = 0, xmax = 0, ymax = 0;
  for (const ChartSeries& s : p.series)
    for (const auto& [x, y] : s.points) {
      xmin = any ? std::min(xmin, x) : x;
      xmax = any ? std::max(xmax, x) : x;
      ymax = std::max(ymax, y);
      any = true;
    }
  if (!p.x_categories.empty()) {
    r.x0 = -0.5;
    r.x1 = double(p.x_categories.size()) - 0.5;
  } else if (any) {
    r.x0 = std::min(0.0, xmin);
    r.x1 = xmax > r.x0 ? xmax : r.x0 + 1;
  }
  const double step = tick_step(ymax * 1.05);
  r.y1 = std::max(step, std::ceil(ymax * 1.05 / step) * step);
  return r;
}

void axes_draw(SvgDocument& d, const ChartPanel& p, const Range& r, double top) {
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = top + kPanelHeight - kPlotBottom,
               y1 = top + kPlotTop;
  d.text(x0, top + 18, p.title, 14, "start", true);
  const double ystep = tick_step(r.y1);
  for (double v = 0; v <= r.y1 + ystep / 2; v += ystep) {
    const double y = y0 - (y0 - y1) * v / r.y1;
    d.line(x0, y, x1, y, "#e0e0e0");
    d.text(x0 - 6, y + 4, tick_label(v, ystep), 11, "end");
  }
  if (!p.x_categories.empty()) {
    for (size_t i = 0; i < p.x_categories.size(); ++i) {
      const double x = x0 + (x1 - x0) * (double(i) - r.x0) / (r.x1 - r.x0);
      d.text(x, y0 + 16, p.x_categories[i], 11, "middle");
    }
  } else {
    const double xstep = tick_step(r.x1 - r.x0);
    for (double v = std::ceil(r.x0 / xstep) * xstep; v <= r.x1 + xstep / 2; v += xstep) {
      const double x = x0 + (x1 - x0) * (v - r.x0) / (r.x1 - r.x0);
      if (x > x1 + 0.5) break;
      d.line(x, y0, x, y0 + 4, "#000000");
      d.text(x, y0 + 16, tick_label(v, xstep), 11, "middle");
    }
  }
  d.line(x0, y0, x1, y0, "#000000");
  d.line(x0, y0, x0, y1, "#000000");
  d.text((x0 + x1) / 2, y0 + 34, p.x_label, 12, "middle");
  d.text(x0 - 60, y1 - 8, p.y_label, 12, "start");
}

void series_draw(SvgDocument& d, const ChartSeries& s, const char* color, const Range& r,
                 double top) {
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = top + kPanelHeight - kPlotBottom,
               y1 = top + kPlotTop;
  std::vector<std::pair<double, double>> pts;
  for (const auto& [x, y] : s.points)
    pts.emplace_back(x0 + (x1 - x0) * (x - r.x0) / (r.x1 - r.x0), y0 - (y0 - y1) * y / r.y1);
  if (s.style == ChartSeries::Style::DOTS) {
    for (const auto& [x, y] : pts) d.circle(x, y, 3.5, color);
  } else if (s.style == ChartSeries::Style::MARKS) {
    for (const auto& [x, y] : pts) d.line(x - 30, y, x + 30, y, color, 2.5);
  } else {
    d.polyline(pts, color, 1.8, s.style == ChartSeries::Style::DASHED ? "6 4" : "");
  }
}

void legend_draw(SvgDocument& d, const ChartPanel& p, double top) {
  const double x = kWidth - kRight + 16;
  for (size_t i = 0; i < p.series.size(); ++i) {
    const double y = top + kPlotTop + 10 + 18 * double(i);
    const ChartSeries& s = p.series[i];
    if (s.style == ChartSeries::Style::DOTS)
      d.circle(x + 10, y - 4, 3.5, color_of(i));
    else if (s.style == ChartSeries::Style::MARKS)
      d.line(x + 4, y - 4, x + 16, y - 4, color_of(i), 2.5);
    else
      d.line(x, y - 4, x + 20, y - 4, color_of(i), 2,
             s.style == ChartSeries::Style::DASHED ? "6 4" : "");
    d.text(x + 26, y, s.name, 11);
  }
}

void notes_draw(SvgDocument& d, const ChartPanel& p, const Range& r, double top) {
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = top + kPanelHeight - kPlotBottom;
  for (const auto& [x, text] : p.notes)
    d.text(x0 + (x1 - x0) * (x - r.x0) / (r.x1 - r.x0), y0 - 8, text, 11, "middle");
}

}  // namespace

std::string chart_svg(const std::string& title, const std::vector<ChartPanel>& panels) {
  SvgDocument d(kWidth, kTop + kPanelHeight * double(panels.size()) + 10);
  d.title(title);
  d.text(kWidth / 2, 24, title, 16, "middle", true);
  for (size_t k = 0; k < panels.size(); ++k) {
    const ChartPanel& p = panels[k];
    const double top = kTop + kPanelHeight * double(k);
    const Range r = range_of(p);
    axes_draw(d, p, r, top);
    for (size_t i = 0; i < p.series.size(); ++i) series_draw(d, p.series[i], color_of(i), r, top);
    legend_draw(d, p, top);
    notes_draw(d, p, r, top);
  }
  return d.str();
}

}  // namespace hr
