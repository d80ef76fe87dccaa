// The lm model as the sync-equivalence test runs it: a small configuration
// with per-example negatives, Markov-chain tokens sharded like core/data's
// TokenReader, trained for some steps on a Session; then every variable read
// back. Shared by the rank program (lm_test_rank.cc) and the test's
// one-process reference.
#ifndef PARALLAX_TESTS_TRAINER_MODELS_LM_RANKS_H_
#define PARALLAX_TESTS_TRAINER_MODELS_LM_RANKS_H_

#include <map>
#include <string>
#include <vector>

#include "tests/trainer/models/synthetic_data.h"
#include "trainer/models/model.h"

namespace parallax::testing {

inline constexpr char kLmEquivalenceConfig[] =
    "vocab = 300\ndim = 8\ncontext = 3\nhidden = 16\nnegatives = 4\n"
    "negative_sharing = \"example\"\ninit_scale = 0.3\n";

// Trains `steps` steps of batch `batch` on `session` (not yet registered),
// as rank `rank` of `world`; fills *vars with every variable's final values.
inline Status TrainLmRank(Session* session, int rank, int world, int batch, int steps,
                          std::map<std::string, std::vector<float>>* vars) {
  models::ModelOptions mo;
  mo.rank = rank;
  mo.world_size = world;
  mo.batch_size = batch;
  mo.steps = steps;
  PX_ASSIGN_OR_RETURN(auto model, models::CreateModel("lm", kLmEquivalenceConfig, mo));
  std::vector<uint32_t> tokens = MarkovTokens(300, 20'000, 21);
  models::ModelData d;
  d.counts = Counts(tokens, 300);
  d.heldout_tokens.assign(tokens.end() - 100, tokens.end());
  d.tokens = std::make_unique<MemoryTokenSource>(tokens, 3, rank, world, 4);
  PX_RETURN_IF_ERROR(model->SetData(std::move(d)));
  PX_RETURN_IF_ERROR(model->Register(session));
  PX_RETURN_IF_ERROR(session->Start());
  models::StepStats st;
  while (session->step() < steps) PX_RETURN_IF_ERROR(model->TrainStep(session, &st));
  int id = 0;
  for (const models::VariableSpec& v : model->Variables()) {
    std::vector<float>& out = (*vars)[v.name];
    if (v.sparse) {
      PX_RETURN_IF_ERROR(session->ReadSparse(id, 0, v.rows, &out));
    } else {
      PX_ASSIGN_OR_RETURN(std::span<const float> values, session->Dense(id));
      out.assign(values.begin(), values.end());
    }
    ++id;
  }
  return Status::Ok();
}

}  // namespace parallax::testing

#endif  // PARALLAX_TESTS_TRAINER_MODELS_LM_RANKS_H_
