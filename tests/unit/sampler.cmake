# Sampler (model/sampling/sampler.c): filters, penalties, seeded draws, logprobs.
llb_add_test(test_sampler SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sampler.c
             LIBS llmbus_sampling PkgConfig::CMOCKA LABELS unit TIMEOUT 120)
# Speculative decoding's pure parts: the n-gram proposer and the rejection sampler.
llb_add_test(test_spec_decode SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_spec_decode.c
             LIBS llmbus_sampling llmbus_ngram_proposer PkgConfig::CMOCKA LABELS unit TIMEOUT 120)
