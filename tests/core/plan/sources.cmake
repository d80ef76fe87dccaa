# Planner: cost model against hand-computed cases, partition search on
# synthetic curves, placement balance on a Zipf profile, sparsity measurement.
list(APPEND PX_CORE_TEST_SOURCES
  plan/comm_disagreement_test.cc
  plan/cost_model_test.cc
  plan/host_figures_test.cc
  plan/hot_presence_test.cc
  plan/job_plan_test.cc
  plan/partition_search_test.cc
  plan/plan_builder_test.cc
  plan/plan_correction_test.cc
  plan/plan_view_test.cc
  plan/placement_test.cc
  plan/report_test.cc
  plan/straggler_test.cc)
list(APPEND PX_CORE_TEST_LIBS px_plan)
