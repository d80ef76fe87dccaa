// Opens a built-in model's data files with the core/data readers, sharded by
// rank: lm reads token files and a vocabulary, ctr Criteo-format TSV files;
// mlp generates its own data and needs none. A missing file is NOT_FOUND
// saying which command creates it (scripts/fetch-data).
#ifndef PARALLAX_TRAINER_MODELS_MODEL_DATA_H_
#define PARALLAX_TRAINER_MODELS_MODEL_DATA_H_

#include "parallax/status.h"
#include "trainer/models/data_source.h"
#include "trainer/models/model.h"

namespace parallax::models {

// Relative defaults: lm's heldout_path and vocab_path default to
// heldout.tok and vocab.tsv next to `data`; ctr's heldout_path to
// heldout.tsv next to `data`, and the Bayes AUC is read from generator.json
// there when present.
StatusOr<ModelData> OpenModelData(const Model& model, const ModelOptions& options);

}  // namespace parallax::models

#endif  // PARALLAX_TRAINER_MODELS_MODEL_DATA_H_
