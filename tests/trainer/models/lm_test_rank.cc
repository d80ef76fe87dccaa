// One rank of the lm sync-equivalence test (lm_ranks.h) under a real
// Session configured from the task environment. Writes every variable to
// OUT as text lines "name v0 v1 …".
//
//   lm_test_rank OUT STEPS BATCH
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "tests/trainer/models/lm_ranks.h"

int main(int argc, char** argv) {
  using namespace parallax;
  if (argc < 4) {
    std::cerr << "usage: lm_test_rank OUT STEPS BATCH\n";
    return 2;
  }
  const std::string out = argv[1];
  auto fail = [](const Status& st) {
    std::cerr << "lm_test_rank: " << st.ToString() << "\n";
    return 1;
  };
  auto options = SessionOptions::FromEnvironment();
  if (!options.ok()) return fail(options.status());
  options->plan_timeout = std::chrono::milliseconds(60'000);
  options->rendezvous_timeout = std::chrono::milliseconds(60'000);
  options->step_timeout = std::chrono::milliseconds(60'000);
  auto session = Session::Create(*options);
  if (!session.ok()) return fail(session.status());
  std::map<std::string, std::vector<float>> vars;
  Status st = testing::TrainLmRank(session->get(), options->rank, options->world_size,
                                   std::atoi(argv[3]), std::atoi(argv[2]), &vars);
  if (!st.ok()) return fail(st);
  std::FILE* f = std::fopen((out + ".tmp").c_str(), "w");
  if (!f) return fail(IoError("cannot write " + out));
  for (const auto& [name, values] : vars) {
    std::fprintf(f, "%s", name.c_str());
    for (float x : values) std::fprintf(f, " %.9g", x);
    std::fprintf(f, "\n");
  }
  std::fclose(f);
  std::rename((out + ".tmp").c_str(), out.c_str());
  return 0;
}
