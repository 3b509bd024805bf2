# End to end on the default model (LLB_DEFAULT_MODEL, fetched by ops/fetch-model.sh):
# prompt ids, first-step logits and greedy continuations against llama.cpp's golden file
# (tests/tools/make_golden.py). Skips without the model locally, fails under CI=true.
if(TARGET llmbus_model AND TARGET llmbus_sampling)
  llb_add_test(test_golden_llamacpp SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_golden_llamacpp.c
               LIBS llmbus_template llmbus_model llmbus_sampling PkgConfig::JANSSON PkgConfig::CMOCKA
               LABELS e2e TIMEOUT 900
               ARGS ${LLB_DEFAULT_MODEL}
                    ${CMAKE_CURRENT_LIST_DIR}/golden/smollm2-135m-instruct-q4_1.json)
endif()
# `llmbus perplexity --numerics ggml` against llama-perplexity's values on Gemma 3 270M Q4_K_M, a
# real K-quant download (ops/fetch-model.sh gemma3, which `make test` runs).
add_test(NAME e2e_perplexity_llamacpp_gemma3
         COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/test_perplexity_llamacpp.py)
set_tests_properties(e2e_perplexity_llamacpp_gemma3 PROPERTIES TIMEOUT 1500 SKIP_RETURN_CODE 77 LABELS e2e
                     ENVIRONMENT "LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_GEMMA3_MODEL=${CMAKE_SOURCE_DIR}/models/gemma-3-270m-q4_k_m.gguf")
