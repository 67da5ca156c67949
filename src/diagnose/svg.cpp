// SvgDocument: elements appended as text; numbers with two decimals.
#include "diagnose/svg.h"

#include <fmt/format.h>

namespace hr {

namespace {

std::string dash_attr(const std::string& dash) {
  return dash.empty() ? std::string() : fmt::format(" stroke-dasharray=\"{}\"", svg_escape(dash));
}

}  // namespace

std::string svg_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

SvgDocument::SvgDocument(double width, double height) : width_(width), height_(height) {}

void SvgDocument::line(double x1, double y1, double x2, double y2, const std::string& stroke,
                       double width, const std::string& dash) {
  body_ += fmt::format(
      "<line x1=\"{:.2f}\" y1=\"{:.2f}\" x2=\"{:.2f}\" y2=\"{:.2f}\" stroke=\"{}\" "
      "stroke-width=\"{:.2f}\"{}/>\n",
      x1, y1, x2, y2, svg_escape(stroke), width, dash_attr(dash));
}

void SvgDocument::polyline(const std::vector<std::pair<double, double>>& points,
                           const std::string& stroke, double width, const std::string& dash) {
  if (points.empty()) return;
  std::string pts;
  for (const auto& [x, y] : points)
    pts += fmt::format("{}{:.2f},{:.2f}", pts.empty() ? "" : " ", x, y);
  body_ += fmt::format(
      "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{:.2f}\"{}/>\n", pts,
      svg_escape(stroke), width, dash_attr(dash));
}

void SvgDocument::rect(double x, double y, double w, double h, const std::string& fill,
                       const std::string& stroke) {
  body_ += fmt::format(
      "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\" "
      "stroke=\"{}\"/>\n",
      x, y, w, h, svg_escape(fill), svg_escape(stroke));
}

void SvgDocument::circle(double cx, double cy, double r, const std::string& fill) {
  body_ += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"{:.2f}\" fill=\"{}\"/>\n", cx, cy,
                       r, svg_escape(fill));
}

void SvgDocument::text(double x, double y, const std::string& s, double size,
                       const std::string& anchor, bool bold) {
  body_ += fmt::format(
      "<text x=\"{:.2f}\" y=\"{:.2f}\" font-size=\"{:.1f}\" text-anchor=\"{}\"{}>{}</text>\n", x, y,
      size, svg_escape(anchor), bold ? " font-weight=\"bold\"" : "", svg_escape(s));
}

void SvgDocument::title(const std::string& s) { title_ = s; }

std::string SvgDocument::str() const {
  std::string s = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\">\n",
      width_, height_);
  if (!title_.empty()) s += "<title>" + svg_escape(title_) + "</title>\n";
  s += fmt::format("<rect x=\"0\" y=\"0\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"white\"/>\n",
                   width_, height_);
  return s + body_ + "</svg>\n";
}

}  // namespace hr
