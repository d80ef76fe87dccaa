# ps_bench: PS throughput, workload W1 (see docs/PERFORMANCE.md).
add_executable(ps_bench ps_bench.cc)
target_link_libraries(ps_bench PRIVATE px_ps px_plan CLI11::CLI11 nlohmann_json::nlohmann_json)
target_compile_definitions(ps_bench PRIVATE PARALLAX_BIN_DIR="${PROJECT_BINARY_DIR}/bin")
add_dependencies(ps_bench parallax-ps)
# Every mode and table kind end to end, small (2 real shards, a few steps):
# a bench that stops working is found by the suite, not by the next person
# who measures.
if(PARALLAX_BUILD_TESTS)
  foreach(table fixed dynamic)
    add_test(NAME ps_bench_smoke_${table}
             COMMAND ps_bench --rows 20000 --k 256 --warmup 2 --steps 5 --runs 1
                     --modes pullpush,pushpull --table ${table} --scheme hash --prefault-mb 4)
    set_tests_properties(ps_bench_smoke_${table} PROPERTIES LABELS integration TIMEOUT 120)
  endforeach()
  add_test(NAME ps_bench_smoke_tables
           COMMAND ps_bench --rows 20000 --k 256 --warmup 2 --steps 5 --runs 1 --tables 3 --dim 16
                   --modes pullpush,pushpull --scheme hash --prefault-mb 4)
  set_tests_properties(ps_bench_smoke_tables PROPERTIES LABELS integration TIMEOUT 120)
  # Batched: one request per shard per worker-step (push-pull), which the
  # shards count themselves.
  add_test(NAME ps_bench_smoke_batch
           COMMAND ps_bench --rows 20000 --k 256 --warmup 2 --steps 5 --runs 1 --tables 3 --dim 16
                   --modes pushpull --scheme hash --prefault-mb 4 --batch true)
  set_tests_properties(ps_bench_smoke_batch PROPERTIES LABELS integration TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "\"shard_requests_per_worker_step\".*\"value\":1\\.0[,}]")
  add_test(NAME ps_bench_smoke_stream
           COMMAND ps_bench --modes stream --stream-ids 200000 --max-rows 20000 --hot 1000 --k 512
                   --every 50 --prefault-mb 4)
  set_tests_properties(ps_bench_smoke_stream PROPERTIES LABELS integration TIMEOUT 120)
endif()
