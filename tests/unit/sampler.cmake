# Sampler (actors/gpu_worker/sampler.c): filters, penalties, seeded draws, logprobs.
llb_add_test(test_sampler SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sampler.c
             LIBS llmbus_sampler PkgConfig::CMOCKA LABELS unit TIMEOUT 120)
