// The SVG writer and the charts: well-formed documents with the elements each series asks for.
#include "diagnose/svg.h"

#include <gtest/gtest.h>

#include "diagnose/chart.h"
#include "svg_check.h"

namespace hr {
namespace {

TEST(Svg, EscapesTextAndAttributes) {
  SvgDocument d(100, 50);
  d.title("a <b> & \"c\"");
  d.text(1, 2, "x < y & z > 'w'");
  d.line(0, 0, 10, 10, "#000\"bad");
  const std::string s = d.str();
  test::SvgCheck c = test::svg_check(s);
  ASSERT_TRUE(c.ok) << c.error << "\n" << s;
  EXPECT_NE(s.find("x &lt; y &amp; z &gt; &apos;w&apos;"), std::string::npos) << s;
  EXPECT_NE(s.find("<title>a &lt;b&gt; &amp; &quot;c&quot;</title>"), std::string::npos) << s;
  EXPECT_EQ(c.count("line"), 1u);
  EXPECT_EQ(c.count("text"), 1u);
}

TEST(Svg, CheckerRejectsBrokenDocuments) {
  // The checker must fail on what it is there to catch, or the tests that use it prove nothing.
  EXPECT_FALSE(test::svg_check("<svg><g></svg>").ok);
  EXPECT_FALSE(test::svg_check("<svg><text>a & b</text></svg>").ok);
  EXPECT_FALSE(test::svg_check("<svg><line x1=1/></svg>").ok);
  EXPECT_FALSE(test::svg_check("<g></g>").ok);
  EXPECT_TRUE(test::svg_check("<svg><line x1=\"1\"/></svg>").ok);
}

TEST(Chart, PanelsSeriesAndCategories) {
  ChartPanel mem{"allocator level: bytes held", "seconds", "MiB", {}, {}};
  mem.series.push_back({"resident", {{0, 1}, {1, 5}, {2, 3}}, ChartSeries::Style::LINE});
  mem.series.push_back({"stream", {{0, 1}, {1.5, 2}}, ChartSeries::Style::DASHED});
  ChartPanel times{"time per image", "", "seconds", {}, {"resident", "stream"}};
  times.series.push_back({"image", {{0, 1.0}, {0, 1.1}, {1, 2.5}}, ChartSeries::Style::DOTS});
  const std::string s = chart_svg("bench <tiny>", {mem, times});
  test::SvgCheck c = test::svg_check(s);
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.count("polyline"), 2u);     // one per line series
  EXPECT_EQ(c.count("circle"), 3u + 1u);  // three dots and one legend mark
  EXPECT_NE(s.find("stroke-dasharray"), std::string::npos);
  EXPECT_NE(s.find(">resident</text>"), std::string::npos);  // category tick and legend
  EXPECT_NE(s.find("bench &lt;tiny&gt;"), std::string::npos);
  EXPECT_NE(s.find("allocator level: bytes held"), std::string::npos);
}

TEST(Chart, EmptyPanelsStayWellFormed) {
  ChartPanel empty{"nothing", "x", "y", {}, {}};
  empty.series.push_back({"none", {}, ChartSeries::Style::LINE});
  test::SvgCheck c = test::svg_check(chart_svg("empty", {empty}));
  EXPECT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.count("polyline"), 0u);
}

}  // namespace
}  // namespace hr
