# Self-calibration: what the trainers' per-call probe makes of a timed call.
list(APPEND PX_CORE_TEST_SOURCES calibration/call_probe_test.cc)
list(APPEND PX_CORE_TEST_LIBS px_calibration)
