// A line chart drawn on the server as inline SVG (no script, nothing fetched
// by the browser): the web page's loss and throughput curves.
#ifndef PARALLAX_COORDINATOR_HTTP_CHART_H_
#define PARALLAX_COORDINATOR_HTTP_CHART_H_

#include <string>
#include <vector>

#include "coordinator/web/job_figures.h"

namespace parallax::coordinator {

struct ChartOptions {
  std::string id;     // the <svg> element's id ("loss-chart")
  std::string title;  // shown above the plot ("loss")
  int width = 560;
  int height = 220;
};

// An <svg class="chart"> with axes, the first and last step and the
// smallest and largest value as labels, and the curve as one
// <polyline class="curve"> of every point (x = step). With no point, a
// chart that says "no points yet".
std::string SvgLineChart(const std::vector<CurvePoint>& points, const ChartOptions& options);

}  // namespace parallax::coordinator

#endif  // PARALLAX_COORDINATOR_HTTP_CHART_H_
