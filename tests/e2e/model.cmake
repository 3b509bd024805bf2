# End to end on the default model (LLB_DEFAULT_MODEL, fetched by ops/fetch-model.sh):
# prompt ids, first-step logits and greedy continuations against llama.cpp's golden file
# (tests/tools/make_golden.py). Skips without the model locally, fails under CI=true.
if(TARGET llmbus_model AND TARGET llmbus_sampler)
  llb_add_test(test_golden_llamacpp SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_golden_llamacpp.c
               LIBS llmbus_model llmbus_sampler PkgConfig::JANSSON PkgConfig::CMOCKA
               LABELS e2e TIMEOUT 900
               ARGS ${LLB_DEFAULT_MODEL}
                    ${CMAKE_CURRENT_LIST_DIR}/golden/smollm2-135m-instruct-q4_1.json)
endif()
