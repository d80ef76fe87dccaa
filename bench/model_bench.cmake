# model_bench: single-process compute throughput of the built-in models
# (tokens/s for lm, samples/s for ctr and mlp); see docs/PERFORMANCE.md. Not a test.
add_executable(model_bench model_bench.cc)
target_link_libraries(model_bench PRIVATE px_models px_trainer CLI11::CLI11 nlohmann_json::nlohmann_json)
