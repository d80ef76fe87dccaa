#include "trainer/models/model_data.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/data/criteo.h"
#include "core/data/token_file.h"
#include "core/data/token_reader.h"
#include "core/data/vocabulary.h"

namespace parallax::models {
namespace {

std::string Sibling(const std::string& path, const std::string& name) {
  return (std::filesystem::path(path).parent_path() / name).string();
}

Status NeedFile(const std::string& model, const std::string& key, const std::string& path,
                const std::string& fetch) {
  if (path.empty()) {
    return InvalidArgument("model '" + model + "' needs [model] " + key + " = \"PATH\" (" + fetch +
                           " writes the default data)");
  }
  if (!std::filesystem::exists(path)) {
    return NotFound("model '" + model + "': " + key + " file '" + path + "' does not exist; run " +
                    fetch + " to create it");
  }
  return Status::Ok();
}

// core/data's readers behind the models' BatchSource interface.
class TokenReaderSource final : public TokenSource {
 public:
  explicit TokenReaderSource(std::unique_ptr<data::TokenReader> r) : r_(std::move(r)) {}
  void Next(size_t batch_size, TokenBatch* out) override {
    tmp_.context.swap(out->context);
    tmp_.targets.swap(out->targets);
    r_->Next(batch_size, &tmp_);
    tmp_.context.swap(out->context);
    tmp_.targets.swap(out->targets);
  }
  std::string SavePosition() const override { return r_->SavePosition(); }
  Status RestorePosition(std::string_view p) override { return r_->RestorePosition(p); }

 private:
  std::unique_ptr<data::TokenReader> r_;
  data::TokenBatch tmp_;
};

class CriteoSource final : public CtrSource {
 public:
  explicit CriteoSource(std::unique_ptr<data::CriteoReader> r) : r_(std::move(r)) {}
  void Next(size_t batch_size, CtrBatch* out) override {
    Swap(out);
    r_->Next(batch_size, &tmp_);
    Swap(out);
  }
  std::string SavePosition() const override { return r_->SavePosition(); }
  Status RestorePosition(std::string_view p) override { return r_->RestorePosition(p); }

 private:
  void Swap(CtrBatch* out) {
    tmp_.labels.swap(out->labels);
    tmp_.dense.swap(out->dense);
    tmp_.categorical.swap(out->categorical);
  }
  std::unique_ptr<data::CriteoReader> r_;
  data::CtrBatch tmp_;
};

StatusOr<ModelData> OpenLm(const Model::DataSpec& spec, const ModelOptions& o) {
  const std::string fetch = "scripts/fetch-data";
  std::string train = spec.paths.at("data");
  PX_RETURN_IF_ERROR(NeedFile("lm", "data", train, fetch));
  std::string heldout = spec.paths.at("heldout_path");
  if (heldout.empty()) heldout = Sibling(train, "heldout.tok");
  std::string vocab = spec.paths.at("vocab_path");
  if (vocab.empty()) vocab = Sibling(train, "vocab.tsv");
  PX_RETURN_IF_ERROR(NeedFile("lm", "heldout_path", heldout, fetch));
  PX_RETURN_IF_ERROR(NeedFile("lm", "vocab_path", vocab, fetch));
  ModelData d;
  data::TokenReaderOptions ro;
  ro.shard = o.rank;
  ro.num_shards = o.world_size;
  ro.seed = spec.seed;
  ro.context = spec.context;
  PX_ASSIGN_OR_RETURN(auto reader, data::TokenReader::Open(train, ro));
  d.tokens = std::make_unique<TokenReaderSource>(std::move(reader));
  PX_ASSIGN_OR_RETURN(d.heldout_tokens, data::ReadTokenFile(heldout));
  PX_ASSIGN_OR_RETURN(data::Vocabulary v, data::Vocabulary::Load(vocab));
  d.counts.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) d.counts[i] = v.count(static_cast<uint32_t>(i));
  return d;
}

StatusOr<ModelData> OpenCtr(const Model::DataSpec& spec, const ModelOptions& o) {
  const std::string fetch = "scripts/fetch-data --synthetic-ctr";
  std::string train = spec.paths.at("data");
  PX_RETURN_IF_ERROR(NeedFile("ctr", "data", train, fetch));
  std::string heldout = spec.paths.at("heldout_path");
  if (heldout.empty()) heldout = Sibling(train, "heldout.tsv");
  PX_RETURN_IF_ERROR(NeedFile("ctr", "heldout_path", heldout, fetch));
  ModelData d;
  data::CriteoReaderOptions ro;
  ro.shard = o.rank;
  ro.num_shards = o.world_size;
  ro.table_sizes = spec.tables;
  ro.raw_ids = spec.raw_ids;
  PX_ASSIGN_OR_RETURN(auto reader, data::CriteoReader::Open(train, ro));
  d.ctr = std::make_unique<CriteoSource>(std::move(reader));
  data::CriteoReaderOptions ho = ro;
  ho.shard = 0;
  ho.num_shards = 1;
  PX_ASSIGN_OR_RETURN(auto held, data::CriteoReader::Open(heldout, ho));
  data::CtrBatch all;
  held->Next(held->size(), &all);
  d.ctr_heldout.labels = std::move(all.labels);
  d.ctr_heldout.dense = std::move(all.dense);
  d.ctr_heldout.categorical = std::move(all.categorical);
  // The generator's Bayes AUC, when the data came from --synthetic-ctr.
  std::ifstream gen(Sibling(train, "generator.json"));
  if (gen) {
    nlohmann::json j = nlohmann::json::parse(gen, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("bayes_auc") && j["bayes_auc"].is_number()) {
      d.ctr_bayes_auc = j["bayes_auc"].get<double>();
    }
  }
  return d;
}

}  // namespace

StatusOr<ModelData> OpenModelData(const Model& model, const ModelOptions& options) {
  const Model::DataSpec spec = model.data_spec();
  if (model.name() == "lm") return OpenLm(spec, options);
  if (model.name() == "ctr") return OpenCtr(spec, options);
  return ModelData{};
}

}  // namespace parallax::models
