# PS wire format, plan/partitioner, initializer, aggregation and client tests
# (the client ones against fake shards on real ZeroMQ sockets).
list(APPEND PX_CORE_TEST_SOURCES
  ps/aggregate_test.cc
  ps/client_recovery_test.cc
  ps/client_test.cc
  ps/dynamic_table_test.cc
  ps/plan_test.cc
  ps/row_cache_test.cc
  ps/wire_test.cc)
list(APPEND PX_CORE_TEST_LIBS px_ps cppzmq PkgConfig::ZMQ)
