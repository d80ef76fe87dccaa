# Collectives (core/comm). Included by tests/core/CMakeLists.txt.
# Unit tests (ranks as threads, loopback, ephemeral ports) go into core_tests.
list(APPEND PX_CORE_TEST_SOURCES
  comm/gloo_communicator_test.cc
  comm/gradient_fusion_test.cc
  comm/host_probe_test.cc
  comm/nccl_communicator_test.cc
  comm/rendezvous_store_test.cc
  comm/shm_communicator_test.cc
  comm/wire_bytes_test.cc)
list(APPEND PX_CORE_TEST_LIBS px_comm)

# Ranks as processes, through a real coordinator served in the test process.
add_executable(comm_test_rank comm/comm_test_rank.cc)
target_link_libraries(comm_test_rank PRIVATE px_comm CLI11::CLI11)
px_add_test(NAME comm_integration_tests
  SOURCES
    comm/comm_process_test.cc
    ../testing/subprocess.cc
  LIBS px_comm px_coordinator SQLite::SQLite3
  LABELS integration)
add_dependencies(comm_integration_tests comm_test_rank)

# NCCL on a real device; every test skips with the reason where none is visible.
if(PARALLAX_HAVE_CUDA)
  px_add_test(NAME comm_gpu_tests
    SOURCES comm/nccl_gpu_test.cc
    LIBS px_comm px_nccl
    LABELS gpu)
endif()

# 2 hosts x 2 ranks in network namespaces (tests/testing/net_hosts.h): the
# hierarchical all-reduce against the flat one, bytes read at the veths.
# Needs root; skips with the reason elsewhere.
px_add_test(NAME comm_multi_host_tests
  SOURCES
    comm/multi_host_test.cc
    ../testing/net_hosts.cc
    ../testing/subprocess.cc
  LIBS px_comm
  LABELS integration)
