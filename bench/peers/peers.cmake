# bench/peers: the PyTorch peers. px-draws prints Parallax's own hashes, alias
# table and initial values, for checking bench/peers/parallax_draws.py (what
# the W3 peer draws with) against the C++ it ports.
add_executable(px-draws ${CMAKE_CURRENT_LIST_DIR}/draws_main.cc)
target_link_libraries(px-draws PRIVATE px_models px_variables px_ps_core CLI11::CLI11
                      nlohmann_json::nlohmann_json)
