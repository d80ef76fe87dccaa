// One rank of the tiny model under a real Session, configured the way an
// agent starts a trainer (schemas/task_env.md). Writes the final variables
// to OUT as text: "w <values>" and "emb <values>" lines.
//
//   trainer_test_rank OUT STEPS BATCH [prefetch|prefetch-early|dim=N]
//
// prefetch-early prefetches the next batch right after this batch's Lookup.
// dim=N registers the embedding with dim N (ranks that disagree).
//
// Fault tests (tests/fault) stop a rank of attempt 1 at a named moment with
// TINY_PAUSE_AT, so that they kill a process exactly then:
//   start    before Session::Start (the peers are in rendezvous),
//   step:N   right after step N,
//   ckpt:N   while the checkpoint of step N is being written (in a state
//            hook: rank 0 has not written the manifest or committed yet).
// TINY_PAUSE_RANK limits it to one rank. The rank writes its pid to
// TINY_PAUSE_DIR/paused-rank<R> and waits until TINY_PAUSE_DIR/go exists.
// TINY_PAUSE_ATTEMPTS=1,2 pauses in each attempt listed instead of the
// first only, at each point of a list (TINY_PAUSE_AT=step:15,step:20), with
// files per attempt and point: paused-a<A>-<point>-rank<R> and
// go-a<A>-<point>.
//
// TINY_DUMP_RESUMED=PATH (with {rank}): a rank that resumed from a
// checkpoint writes the model as Start() restored it there, before training
// (tests of resuming with another number of workers and shards).
//
// TINY_HOLD_AT=N,M,... (with TINY_PAUSE_DIR, attempt 1) holds every rank
// right after each of those steps: it writes held-rank<R>-step<N> and waits
// for go-step<N> (tests that act on a running job at a known step).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "tests/trainer/tiny_trainer.h"

namespace {

int Fail(const parallax::Status& st) {
  std::cerr << "trainer_test_rank: " << st.ToString() << "\n";
  return 1;
}

// The TINY_PAUSE_* hook; see the top of this file.
struct PausePoint {
  std::string at;  // "" when off; with TINY_PAUSE_ATTEMPTS a list
  std::string dir;
  std::string attempt_tag;  // "" or "-a<attempt>" (TINY_PAUSE_ATTEMPTS)

  void Maybe(const std::string& here, int rank) const {
    if (at.empty()) return;
    const bool listed = ("," + at + ",").find("," + here + ",") != std::string::npos;
    if (attempt_tag.empty() ? here != at : !listed) return;
    const std::string tag = attempt_tag.empty() ? "" : attempt_tag + "-" + here;
    const std::string paused = dir + "/paused" + tag + "-rank" + std::to_string(rank);
    {
      std::ofstream m(paused + ".tmp");
      m << getpid() << "\n";
    }
    std::filesystem::rename(paused + ".tmp", paused);
    // Released by the test (or killed by it); polling a file is all a
    // test program needs here.
    while (!std::filesystem::exists(dir + "/go" + tag)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
};

// Writes "w <values>", "emb <values>" (and "resumed <step>") to `out`.
parallax::Status WriteModel(parallax::Session* session, int emb, int w, const std::string& out) {
  using namespace parallax;
  auto wv = session->Dense(w);
  if (!wv.ok()) return wv.status();
  std::FILE* f = std::fopen((out + ".tmp").c_str(), "w");
  if (!f) return IoError("cannot write " + out);
  std::fprintf(f, "w");
  for (float x : *wv) std::fprintf(f, " %.9g", x);
  std::fprintf(f, "\nemb");
  // In chunks, as one would stream a large table from the shards; the
  // spread ids (TINY_DYNAMIC=spread) one row at a time.
  const bool spread = testing::TinyDynamic() == "spread";
  std::vector<float> rows;
  for (int64_t first = 0; first < testing::TinyModel::kRows; first += spread ? 1 : 32) {
    const int64_t count = spread ? 1 : std::min<int64_t>(32, testing::TinyModel::kRows - first);
    Status st = session->ReadSparse(emb, testing::TinyId(first, spread), count, &rows);
    if (!st.ok()) {
      std::fclose(f);
      return st;
    }
    for (float x : rows) std::fprintf(f, " %.9g", x);
  }
  std::fprintf(f, "\n");
  if (auto from = session->resumed_from())
    std::fprintf(f, "resumed %lld\n", static_cast<long long>(*from));
  std::fclose(f);
  std::rename((out + ".tmp").c_str(), out.c_str());
  return Status::Ok();
}

std::string WithRank(std::string path, int rank) {
  if (const size_t at = path.find("{rank}"); at != std::string::npos) {
    path.replace(at, 6, std::to_string(rank));
  }
  return path;
}

// The TINY_HOLD_AT hook; see the top of this file.
struct HoldPoints {
  std::set<int64_t> steps;
  std::string dir;

  void Maybe(int64_t step, int rank) const {
    if (!steps.count(step)) return;
    const std::string name = "step" + std::to_string(step);
    std::ofstream(dir + "/held-rank" + std::to_string(rank) + "-" + name) << getpid() << "\n";
    while (!std::filesystem::exists(dir + "/go-" + name)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace parallax;
  if (argc < 4) {
    std::cerr << "usage: trainer_test_rank OUT STEPS BATCH [prefetch]\n";
    return 2;
  }
  std::string out = argv[1];
  const int steps = std::atoi(argv[2]);
  const int64_t batch = std::atoll(argv[3]);
  const std::string extra = argc > 4 ? argv[4] : "";
  const bool prefetch_early = extra == "prefetch-early";
  const bool prefetch = extra == "prefetch" || prefetch_early;
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
  options->config.trainer.metrics_every = 5;
  if (const size_t at = out.find("{rank}"); at != std::string::npos) {
    out.replace(at, 6, std::to_string(options->rank));
  }
  int64_t exit_at = -1;
  const char* exit_step = std::getenv("TINY_EXIT_AT_STEP");
  const char* exit_rank = std::getenv("TINY_EXIT_RANK");
  if (exit_step && options->attempt == 1 && (!exit_rank || std::atoi(exit_rank) == options->rank)) {
    exit_at = std::atoll(exit_step);
  }
  PausePoint pause;
  const char* pause_at = std::getenv("TINY_PAUSE_AT");
  const char* pause_rank = std::getenv("TINY_PAUSE_RANK");
  const char* pause_dir = std::getenv("TINY_PAUSE_DIR");
  const char* pause_attempts = std::getenv("TINY_PAUSE_ATTEMPTS");
  bool pause_here = options->attempt == 1;
  if (pause_attempts) {
    const std::string list = std::string(",") + pause_attempts + ",";
    pause_here = list.find("," + std::to_string(options->attempt) + ",") != std::string::npos;
    pause.attempt_tag = "-a" + std::to_string(options->attempt);
  }
  if (pause_at && pause_dir && pause_here &&
      (!pause_rank || std::atoi(pause_rank) == options->rank)) {
    pause.at = pause_at;
    pause.dir = pause_dir;
  }
  HoldPoints hold;
  if (const char* at = std::getenv("TINY_HOLD_AT"); at && pause_dir && options->attempt == 1) {
    std::stringstream list(at);
    std::string item;
    while (std::getline(list, item, ',')) hold.steps.insert(std::atoll(item.c_str()));
    hold.dir = pause_dir;
  }
  const int rank = options->rank;
  auto session = Session::Create(*options);
  if (!session.ok()) return Fail(session.status());
  int emb = -1, w = -1;
  Status st = testing::RegisterTiny(session->get(), &emb, &w, emb_dim);
  if (!st.ok()) return Fail(st);
  testing::TinyReader reader;
  st = testing::RegisterTinyReader(session->get(), &reader);
  if (!st.ok()) return Fail(st);
  // Saved with every checkpoint (the reader's position is the step).
  st = (*session)->RegisterState(
      "fault-hook",
      [&] {
        pause.Maybe("ckpt:" + std::to_string(reader.position), rank);
        return std::string();
      },
      [](std::string_view) { return Status::Ok(); });
  if (!st.ok()) return Fail(st);
  pause.Maybe("start", rank);
  st = (*session)->Start();
  if (!st.ok()) return Fail(st);
  if (const char* dump = std::getenv("TINY_DUMP_RESUMED"); dump && (*session)->resumed_from()) {
    st = WriteModel(session->get(), emb, w, WithRank(dump, rank));
    if (!st.ok()) return Fail(st);
  }
  st = testing::TrainTiny(session->get(), emb, w, steps, batch, prefetch, &reader, exit_at,
                          [&](int64_t step) {
                            pause.Maybe("step:" + std::to_string(step), rank);
                            hold.Maybe(step, rank);
                          },
                          prefetch_early);
  if (!st.ok()) return Fail(st);

  st = WriteModel(session->get(), emb, w, out);
  if (!st.ok()) return Fail(st);
  std::cout << "trainer_test_rank: rank " << rank << " done" << std::endl;
  return 0;
}
