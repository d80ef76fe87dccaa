// The tiny model (tiny_model.h) trained two ways: through a Session (what a
// rank runs), and as a one-process reference with core/optim directly (no
// distributed parts). Header-only so the test rank program and the tests
// share it.
#ifndef PARALLAX_TESTS_TRAINER_TINY_TRAINER_H_
#define PARALLAX_TESTS_TRAINER_TINY_TRAINER_H_

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/optim/optimizer.h"
#include "core/ps/plan.h"
#include "tests/testing/relative_difference.h"
#include "tests/trainer/tiny_model.h"
#include "parallax/session.h"

namespace parallax::testing {

inline Initializer EmbInit() { return {Initializer::Type::kUniform, 7, 0.5f}; }
inline Initializer WInit() { return {Initializer::Type::kUniform, 9, 0.5f}; }

// TINY_DYNAMIC in the environment: "1" makes emb a dynamic table
// (Session::RegisterDynamic: admitted at once, no budget) that the batches'
// ids 0..kRows-1 fill; "spread" too, with the model's row r sent as the id
// TinyId(r): a bijection onto the whole 64-bit range, negative int64
// included.
inline std::string TinyDynamic() {
  const char* d = std::getenv("TINY_DYNAMIC");
  return d == nullptr ? "" : d;
}
// TINY_DRIFT_AT=N: from global step N on the data drifts, row r's lookups
// going to row kRows-1-r (the skew moves from the small ids to the large).
inline int64_t TinyDriftAt() {
  const char* d = std::getenv("TINY_DRIFT_AT");
  return d == nullptr ? -1 : std::atoll(d);
}
inline TinyModel::Batch TinyBatchAt(int64_t position, int64_t first, int64_t batch) {
  TinyModel::Batch b = TinyModel::MakeBatch(position, first, batch);
  if (const int64_t at = TinyDriftAt(); at >= 0 && position >= at) {
    for (int64_t& id : b.ids) id = TinyModel::kRows - 1 - id;
  }
  return b;
}
inline int64_t TinyId(int64_t row, bool spread) {
  return spread ? static_cast<int64_t>(ps::Mix64(static_cast<uint64_t>(row) + 1)) : row;
}
inline std::vector<int64_t> TinyIds(std::vector<int64_t> rows, bool spread) {
  for (int64_t& r : rows) r = TinyId(r, spread);
  return rows;
}

// Registration order fixes the ids: emb 0, w 1. `emb_dim` other than
// kDim is for testing ranks that disagree.
inline Status RegisterTiny(Session* session, int* emb, int* w, uint32_t emb_dim = TinyModel::kDim) {
  VariableOptions eo;
  eo.init = EmbInit();
  if (TinyDynamic() == "1" || TinyDynamic() == "spread") {
    PX_ASSIGN_OR_RETURN(*emb, session->RegisterDynamic("emb", emb_dim, {}, eo));
  } else {
    PX_ASSIGN_OR_RETURN(*emb, session->RegisterSparse("emb", TinyModel::kRows, emb_dim, eo));
  }
  for (int s = 0; s < 3; ++s) {
    TinyModel::Batch b = TinyModel::MakeBatch(s, 0, 32);
    PX_RETURN_IF_ERROR(session->SampleIds(*emb, b.ids));
  }
  VariableOptions wo;
  wo.init = WInit();
  PX_ASSIGN_OR_RETURN(*w, session->RegisterDense("w", TinyModel::kDim, wo));
  return Status::Ok();
}

// The data reader's position (the next global step's batch), saved with
// every checkpoint through RegisterState: a resumed rank reads on where the
// checkpoint left off.
struct TinyReader {
  int64_t position = 0;
};

inline Status RegisterTinyReader(Session* session, TinyReader* reader) {
  return session->RegisterState(
      "reader", [reader] { return std::to_string(reader->position); },
      [reader](std::string_view bytes) -> Status {
        const std::string s(bytes);
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return InvalidArgument("reader state \"" + s + "\" is not a position");
        reader->position = std::stoll(s);
        return Status::Ok();
      });
}

// Trains until step() reaches `steps`, batch `batch` per rank: rank r takes
// the samples [r·batch, (r+1)·batch) of the reader's global step. With
// `prefetch`, the next batch's rows are prefetched before Step(), or, with
// `prefetch_early` too, right after this batch's Lookup() (the eager pull:
// in flight while the batch computes). Without a reader, the position is
// step(). `exit_at` (test of resuming): the process exits with status 3
// right after step() reaches it. `after_step` (fault tests) is called with
// step() after every step.
inline Status TrainTiny(Session* session, int emb, int w, int steps, int64_t batch, bool prefetch,
                        TinyReader* reader = nullptr, int64_t exit_at = -1,
                        const std::function<void(int64_t)>& after_step = {},
                        bool prefetch_early = false) {
  const int64_t first = static_cast<int64_t>(session->options().rank) * batch;
  const bool spread = TinyDynamic() == "spread";
  std::vector<float> rows;
  TinyReader local{session->step()};
  TinyReader* r = reader ? reader : &local;
  while (session->step() < steps) {
    const int64_t step = session->step();
    TinyModel::Batch b = TinyBatchAt(r->position, first, batch);
    b.ids = TinyIds(std::move(b.ids), spread);
    PX_RETURN_IF_ERROR(session->Lookup(emb, b.ids, &rows));
    const bool prefetch_next = prefetch && step + 1 < steps;
    if (prefetch_next && prefetch_early) {
      PX_RETURN_IF_ERROR(session->Prefetch(
          emb, TinyIds(TinyBatchAt(r->position + 1, first, batch).ids, spread)));
    }
    PX_ASSIGN_OR_RETURN(std::span<const float> wv, session->Dense(w));
    std::vector<float> wcopy(wv.begin(), wv.end());
    TinyModel::Grads g = TinyModel::ForwardBackward(b, rows, wcopy);
    PX_RETURN_IF_ERROR(session->Gradient(w, g.dw));
    PX_RETURN_IF_ERROR(session->Gradient(emb, b.ids, g.row_grads));
    if (prefetch_next && !prefetch_early) {
      PX_RETURN_IF_ERROR(session->Prefetch(
          emb, TinyIds(TinyBatchAt(r->position + 1, first, batch).ids, spread)));
    }
    ++r->position;  // consumed: a checkpoint at this step saves the next position
    PX_RETURN_IF_ERROR(session->Step());
    PX_RETURN_IF_ERROR(session->ReportMetrics(step, g.loss, batch));
    if (session->step() == exit_at) std::_Exit(3);
    if (after_step) after_step(session->step());
  }
  return Status::Ok();
}

struct TinyResult {
  std::vector<float> w;
  std::vector<float> emb;  // kRows × kDim
};

// One process, batch `batch`, no Session: what N ranks × batch/N must equal.
// With `spread`, row r starts from the initializer's values of id TinyId(r)
// (TINY_DYNAMIC=spread): the same training over those ids.
inline TinyResult TrainTinyReference(const OptimizerSettings& dense,
                                     const OptimizerSettings& sparse, int steps, int64_t batch,
                                     bool spread = false) {
  constexpr uint32_t kEmbId = 0, kWId = 1, dim = TinyModel::kDim;
  TinyResult r;
  r.w = InitialDenseValues(WInit(), kWId, dim);
  r.emb.resize(TinyModel::kRows * dim);
  for (int64_t row = 0; row < TinyModel::kRows; ++row) {
    InitialSparseRow(EmbInit(), kEmbId, TinyId(row, spread), dim, r.emb.data() + row * dim);
  }
  optim::DenseOptimizer wopt(dense, dim);
  optim::SparseOptimizer eopt(sparse, TinyModel::kRows, dim);
  for (int step = 0; step < steps; ++step) {
    TinyModel::Batch b = TinyModel::MakeBatch(step, 0, batch);
    std::vector<float> rows;
    for (int64_t id : b.ids)
      rows.insert(rows.end(), r.emb.begin() + id * dim, r.emb.begin() + (id + 1) * dim);
    TinyModel::Grads g = TinyModel::ForwardBackward(b, rows, r.w);
    std::map<int64_t, std::vector<float>> sum;
    for (size_t i = 0; i < b.ids.size(); ++i) {
      auto& s = sum[b.ids[i]];
      s.resize(dim, 0.0f);
      for (uint32_t j = 0; j < dim; ++j) s[j] += g.row_grads[i * dim + j];
    }
    std::vector<int64_t> ids;
    std::vector<float> grads;
    for (auto& [id, s] : sum) {
      ids.push_back(id);
      grads.insert(grads.end(), s.begin(), s.end());
    }
    wopt.Apply(g.dw, r.w);
    if (!eopt.Apply(ids, grads, r.emb).ok()) std::abort();
  }
  return r;
}

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TRAINER_TINY_TRAINER_H_
