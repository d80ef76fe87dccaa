# Optimizer math (dense and lazy sparse forms) against written-out references.
list(APPEND PX_CORE_TEST_SOURCES optim/optimizer_test.cc)
list(APPEND PX_CORE_TEST_LIBS px_optim)
