// parallax-timeline-stats TRACE...: reads step timelines written by
// `timeline = DIR` / `parallax run --timeline DIR` (trainer/timeline.h) and
// prints the overlapped fraction of communication time over every rank of
// every file as one JSON line (docs/PERFORMANCE.md, "Timeline").
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "trainer/timeline.h"

int main(int argc, char** argv) {
  CLI::App app{
      "parallax-timeline-stats: the fraction of communication time (all-reduce buckets, PS "
      "push and pull in flight) that overlaps compute, from step timelines",
      "parallax-timeline-stats"};
  std::vector<std::string> files;
  app.add_option("TRACE", files, "rank-<r>.trace.json files")->required()->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  parallax::trainer::Overlap total;
  int ranks = 0;
  for (const std::string& file : files) {
    auto intervals = parallax::trainer::ReadTraceIntervals(file);
    if (!intervals.ok()) {
      std::cerr << "parallax-timeline-stats: " << intervals.status().ToString() << "\n";
      return 1;
    }
    for (const auto& rank : *intervals) {
      const parallax::trainer::Overlap o = parallax::trainer::ComputeOverlap(rank);
      total.comm_us += o.comm_us;
      total.overlapped_us += o.overlapped_us;
      total.comm_intervals += o.comm_intervals;
      total.overlapping_intervals += o.overlapping_intervals;
      ++ranks;
    }
  }
  std::cout << parallax::trainer::OverlapJsonLine(total, ranks) << "\n";
  return 0;
}
