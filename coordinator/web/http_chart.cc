#include "coordinator/web/http_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "coordinator/web/http_html.h"

namespace parallax::coordinator {
namespace {

// A label of at most about 7 characters: 3 significant digits, with k, M
// or G for large values and an exponent for tiny ones.
std::string Short(double v) {
  char buf[64];
  const double a = std::fabs(v);
  if (a >= 1e4) {
    const char* unit = a >= 1e9 ? "G" : a >= 1e6 ? "M" : "k";
    const double scale = a >= 1e9 ? 1e9 : a >= 1e6 ? 1e6 : 1e3;
    std::snprintf(buf, sizeof(buf), "%.3g%s", v / scale, unit);
  } else if (a > 0 && a < 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.2e", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4g", v);
  }
  return buf;
}

}  // namespace

std::string SvgLineChart(const std::vector<CurvePoint>& points, const ChartOptions& options) {
  const double w = options.width, h = options.height;
  const double left = 72, right = 16, top = 28, bottom = 32;
  const double pw = w - left - right, ph = h - top - bottom;
  std::string svg = "<svg class=\"chart\" id=\"" + HtmlEscape(options.id) +
                    "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Fixed(w, 0) +
                    "\" height=\"" + Fixed(h, 0) + "\" viewBox=\"0 0 " + Fixed(w, 0) + " " +
                    Fixed(h, 0) + "\" role=\"img\" aria-label=\"" + HtmlEscape(options.title) +
                    "\">";
  svg += "<text class=\"chart-title\" x=\"" + Fixed(left, 0) + "\" y=\"18\">" +
         HtmlEscape(options.title) + "</text>";
  svg += "<rect class=\"plot\" x=\"" + Fixed(left, 0) + "\" y=\"" + Fixed(top, 0) + "\" width=\"" +
         Fixed(pw, 0) + "\" height=\"" + Fixed(ph, 0) + "\"/>";
  std::vector<CurvePoint> finite;
  for (const CurvePoint& p : points) {
    if (std::isfinite(p.step) && std::isfinite(p.value)) finite.push_back(p);
  }
  if (finite.empty()) {
    svg += "<text class=\"empty\" x=\"" + Fixed(left + pw / 2, 0) + "\" y=\"" +
           Fixed(top + ph / 2, 0) + "\" text-anchor=\"middle\">no points yet</text></svg>";
    return svg;
  }
  double x0 = finite.front().step, x1 = finite.back().step;
  auto [lo, hi] = std::minmax_element(
      finite.begin(), finite.end(), [](const auto& a, const auto& b) { return a.value < b.value; });
  double y0 = lo->value, y1 = hi->value;
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) {
    y0 -= 0.5;
    y1 += 0.5;
  }
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + ph - (y - y0) / (y1 - y0) * ph; };
  svg += "<polyline class=\"curve\" fill=\"none\" points=\"";
  for (size_t i = 0; i < finite.size(); ++i) {
    if (i > 0) svg += ' ';
    svg += Fixed(px(finite[i].step), 1) + "," + Fixed(py(finite[i].value), 1);
  }
  svg += "\"/>";
  auto label = [&](double x, double y, const std::string& anchor, const std::string& text) {
    svg += "<text class=\"axis\" x=\"" + Fixed(x, 0) + "\" y=\"" + Fixed(y, 0) +
           "\" text-anchor=\"" + anchor + "\">" + HtmlEscape(text) + "</text>";
  };
  label(left - 6, top + 10, "end", Short(y1));
  label(left - 6, top + ph, "end", Short(y0));
  label(left, h - 10, "start", "step " + Fixed(x0, 0));
  label(left + pw, h - 10, "end", "step " + Fixed(x1, 0));
  svg += "</svg>";
  return svg;
}

}  // namespace parallax::coordinator
