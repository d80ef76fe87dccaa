// A custom trainer: one rank of a toy click model written against
// libparallax only (<parallax/session.h>). Each sample is a few feature ids;
// their embedding rows are averaged, dotted with a dense weight vector and
// fed through a sigmoid; the loss is the log loss against a synthetic label.
//
// Started by `parallax run job.toml` (or an agent), it reads everything from
// the environment the agent sets; see examples/custom_trainer/job.toml.
#include <parallax/session.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

namespace {

constexpr uint32_t kDim = 8;
constexpr int kIdsPerSample = 4;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Sample `s` of step `step`: ids skewed toward small rows; the label depends
// on whether the ids are mostly even, so there is something to learn.
void MakeSample(int64_t step, int64_t s, int64_t rows, int64_t* ids, float* label) {
  uint64_t h = Mix(static_cast<uint64_t>(step) * 1000003u + static_cast<uint64_t>(s));
  int even = 0;
  for (int k = 0; k < kIdsPerSample; ++k) {
    h = Mix(h);
    ids[k] = static_cast<int64_t>((h % static_cast<uint64_t>(rows)) * ((h >> 32) % 100) / 100);
    even += ids[k] % 2 == 0;
  }
  *label = even * 2 > kIdsPerSample ? 1.0f : 0.0f;
}

int Run() {
  using namespace parallax;
  auto options = SessionOptions::FromEnvironment();
  if (!options.ok()) {
    std::cerr << options.status().ToString() << "\n";
    return 2;
  }
  int64_t steps = 100, batch = 32, rows = 5000;
  if (options->has_job_file()) {
    steps = options->config.trainer.steps;
    batch = options->config.trainer.batch_size;
    // [user] is passed through untouched; a real trainer would parse it
    // with its TOML library. Here only "ids = N" is looked for.
    const std::string& user = options->config.user_toml;
    const size_t at = user.find("ids = ");
    if (at != std::string::npos) rows = std::stoll(user.substr(at + 6));
  }
  auto session = Session::Create(*options);
  if (!session.ok()) {
    std::cerr << session.status().ToString() << "\n";
    return 1;
  }
  Session& s = **session;
  VariableOptions emb_options, w_options;
  emb_options.init.scale = 0.1f;
  w_options.init.scale = 1.0f;
  auto emb = s.RegisterSparse("embedding", rows, kDim, emb_options);
  auto w = s.RegisterDense("weights", kDim, w_options);
  if (!emb.ok() || !w.ok()) {
    std::cerr << (emb.ok() ? w.status() : emb.status()).ToString() << "\n";
    return 1;
  }
  const int64_t first = static_cast<int64_t>(options->rank) * batch;
  std::vector<int64_t> ids(static_cast<size_t>(batch * kIdsPerSample));
  std::vector<float> labels(static_cast<size_t>(batch));
  for (int64_t b = 0; b < 3; ++b) {  // sparsity from a few batches
    for (int64_t i = 0; i < batch; ++i)
      MakeSample(-1 - b, first + i, rows, &ids[i * kIdsPerSample], &labels[i]);
    if (Status st = s.SampleIds(*emb, ids); !st.ok()) return std::cerr << st.ToString() << "\n", 1;
  }
  if (Status st = s.Start(); !st.ok()) {
    std::cerr << st.ToString() << "\n";
    return 1;
  }
  std::vector<float> rows_of_batch, dw(kDim), drows;
  // From step() on: a resumed job (trainer.checkpoint_every) starts at its
  // checkpoint's step; the data here is a pure function of the step.
  for (int64_t step = s.step(); step < steps; step = s.step()) {
    for (int64_t i = 0; i < batch; ++i)
      MakeSample(step, first + i, rows, &ids[i * kIdsPerSample], &labels[i]);
    Status st = s.Lookup(*emb, ids, &rows_of_batch);
    auto wv = s.Dense(*w);
    if (!st.ok() || !wv.ok())
      return std::cerr << (st.ok() ? wv.status() : st).ToString() << "\n", 1;
    std::fill(dw.begin(), dw.end(), 0.0f);
    drows.assign(ids.size() * kDim, 0.0f);
    double loss = 0;
    for (int64_t i = 0; i < batch; ++i) {
      float h[kDim] = {};
      for (int k = 0; k < kIdsPerSample; ++k)
        for (uint32_t j = 0; j < kDim; ++j)
          h[j] += rows_of_batch[(i * kIdsPerSample + k) * kDim + j] / kIdsPerSample;
      float z = 0;
      for (uint32_t j = 0; j < kDim; ++j) z += (*wv)[j] * h[j];
      const float p = 1.0f / (1.0f + std::exp(-z));
      loss -= (labels[i] * std::log(p + 1e-7f) + (1 - labels[i]) * std::log(1 - p + 1e-7f)) / batch;
      const float dz = (p - labels[i]) / static_cast<float>(batch);
      for (uint32_t j = 0; j < kDim; ++j) {
        dw[j] += dz * h[j];
        for (int k = 0; k < kIdsPerSample; ++k)
          drows[(i * kIdsPerSample + k) * kDim + j] = dz * (*wv)[j] / kIdsPerSample;
      }
    }
    if (st = s.Gradient(*w, dw); st.ok()) st = s.Gradient(*emb, ids, drows);
    if (st.ok()) st = s.Step();
    if (st.ok()) st = s.ReportMetrics(step, loss, batch);
    if (!st.ok()) return std::cerr << st.ToString() << "\n", 1;
    if (step % 50 == 0 || step + 1 == steps) {
      std::cout << "rank " << options->rank << " step " << step << " loss " << loss << std::endl;
    }
  }
  return 0;
}

}  // namespace

int main() { return Run(); }
