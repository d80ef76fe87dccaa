# bench/cluster: the emulated cluster (hosts in network namespaces with shaped
# links; bench/cluster/cluster.py drives it). px-net-hosts is the scripts'
# handle on tests/testing/net_hosts.h, the same code the multi-host tests use.
add_executable(px-net-hosts
  ${CMAKE_CURRENT_LIST_DIR}/net_hosts_main.cc
  ${PROJECT_SOURCE_DIR}/tests/testing/net_hosts.cc
  ${PROJECT_SOURCE_DIR}/tests/testing/subprocess.cc)
target_link_libraries(px-net-hosts PRIVATE CLI11::CLI11 nlohmann_json::nlohmann_json)
