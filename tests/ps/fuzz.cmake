# ps_wire_fuzz: PS messages into the parser and a shard core (cmake/PxFuzz.cmake).
set(src ${PROJECT_SOURCE_DIR})
px_add_fuzz_target(NAME ps_wire_fuzz CORPUS ps_wire
  SOURCES
    ${src}/tests/ps/ps_wire_fuzz.cc
    ${src}/core/ps/wire.cc
    ${src}/core/ps/shm_region.cc
    ${src}/core/ps/plan.cc
    ${src}/core/ps/consistency_schedule.cc
    ${src}/core/ps/initializer.cc
    ${src}/core/ps/partition_file.cc
    ${src}/core/ps/dynamic_table.cc
    ${src}/core/ps/dynamic_file.cc
    ${src}/core/ps/row_state.cc
    ${src}/ps/shard_core.cc
    ${src}/ps/shard_core_consistency.cc
    ${src}/ps/updates_file.cc
    ${src}/ps/variable_table.cc
    ${src}/core/optim/optimizer.cc
    ${src}/ps/checkpoint.cc
    ${src}/core/base/finite.cc
    ${src}/ps/reshard.cc
    ${src}/core/base/settings.cc
    ${src}/core/base/status.cc
    ${src}/core/base/logging.cc
    ${src}/core/base/clock.cc
    ${src}/core/base/time_format.cc
    ${src}/core/base/durable_file.cc
    ${src}/core/checkpoint/rank_files.cc
  # core/ps/dynamic_table's index: Abseil's flat_hash_map and its hash;
  # core/base/durable_file's SHA-256: OpenSSL's libcrypto.
  LIBS -labsl_raw_hash_set -labsl_hash -labsl_city -labsl_low_level_hash -labsl_hashtablez_sampler
    -lcrypto)
