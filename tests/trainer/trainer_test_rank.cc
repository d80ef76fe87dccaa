// One rank of the tiny model under a real Session, configured the way an
// agent starts a trainer (schemas/task_env.md). Writes the final variables
// to OUT as text: "w <values>" and "emb <values>" lines.
//
//   trainer_test_rank OUT STEPS BATCH [prefetch|dim=N]
//
// dim=N registers the embedding with dim N (ranks that disagree).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "tests/trainer/tiny_trainer.h"

namespace {

int Fail(const parallax::Status& st) {
  std::cerr << "trainer_test_rank: " << st.ToString() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace parallax;
  if (argc < 4) {
    std::cerr << "usage: trainer_test_rank OUT STEPS BATCH [prefetch]\n";
    return 2;
  }
  const std::string out = argv[1];
  const int steps = std::atoi(argv[2]);
  const int64_t batch = std::atoll(argv[3]);
  const std::string extra = argc > 4 ? argv[4] : "";
  const bool prefetch = extra == "prefetch";
  const uint32_t emb_dim = extra.rfind("dim=", 0) == 0
                               ? static_cast<uint32_t>(std::atoi(extra.c_str() + 4))
                               : testing::TinyModel::kDim;

  auto options = SessionOptions::FromEnvironment();
  if (!options.ok()) return Fail(options.status());
  options->plan_timeout = std::chrono::milliseconds(60'000);
  options->rendezvous_timeout = std::chrono::milliseconds(60'000);
  // Tests that expect a peer to fail shorten the rendezvous.
  if (const char* t = std::getenv("TINY_RENDEZVOUS_MS")) {
    options->rendezvous_timeout = std::chrono::milliseconds(std::atoll(t));
  }
  options->step_timeout = std::chrono::milliseconds(60'000);
  options->metrics_every = 5;
  auto session = Session::Create(*options);
  if (!session.ok()) return Fail(session.status());
  int emb = -1, w = -1;
  Status st = testing::RegisterTiny(session->get(), &emb, &w, emb_dim);
  if (!st.ok()) return Fail(st);
  st = (*session)->Start();
  if (!st.ok()) return Fail(st);
  st = testing::TrainTiny(session->get(), emb, w, steps, batch, prefetch);
  if (!st.ok()) return Fail(st);

  auto wv = (*session)->Dense(w);
  if (!wv.ok()) return Fail(wv.status());
  std::FILE* f = std::fopen((out + ".tmp").c_str(), "w");
  if (!f) return Fail(IoError("cannot write " + out));
  std::fprintf(f, "w");
  for (float x : *wv) std::fprintf(f, " %.9g", x);
  std::fprintf(f, "\nemb");
  // In chunks, as one would stream a large table from the shards.
  std::vector<float> rows;
  for (int64_t first = 0; first < testing::TinyModel::kRows; first += 32) {
    const int64_t count = std::min<int64_t>(32, testing::TinyModel::kRows - first);
    st = (*session)->ReadSparse(emb, first, count, &rows);
    if (!st.ok()) return Fail(st);
    for (float x : rows) std::fprintf(f, " %.9g", x);
  }
  std::fprintf(f, "\n");
  std::fclose(f);
  std::rename((out + ".tmp").c_str(), out.c_str());
  return 0;
}
