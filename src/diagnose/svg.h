// A small SVG writer: the elements the diagnosis charts need (lines, polylines, rectangles,
// circles, text), with attribute values and text escaped so the document is always well formed.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace hr {

class SvgDocument {
 public:
  SvgDocument(double width, double height);

  // stroke: a colour ("#1f77b4"); dash: "" for solid or an SVG dash array ("4 3").
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
            const std::string& dash = "");
  void polyline(const std::vector<std::pair<double, double>>& points, const std::string& stroke,
                double width = 1.5, const std::string& dash = "");
  void rect(double x, double y, double w, double h, const std::string& fill,
            const std::string& stroke = "none");
  void circle(double cx, double cy, double r, const std::string& fill);
  // anchor: "start", "middle" or "end".
  void text(double x, double y, const std::string& s, double size = 12,
            const std::string& anchor = "start", bool bold = false);
  // A <title> child of the document: what viewers show as the document's name.
  void title(const std::string& s);

  // The whole document, starting with the XML declaration.
  std::string str() const;

 private:
  double width_, height_;
  std::string title_;
  std::string body_;
};

// Escapes &, <, >, " and ' for text and attribute values.
std::string svg_escape(const std::string& s);

}  // namespace hr
