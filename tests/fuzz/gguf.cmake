# GGUF reader fuzzing.
# fuzz_gguf_driver: deterministic mutation driver (truncations + seeded byte flips of files
# made by the test GGUF writer), any compiler, runs under ctest for ~3 s.
llb_add_test(fuzz_gguf_driver SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_gguf.c
             LIBS llmbus_model llmbus_test_gguf_writer LABELS fuzz TIMEOUT 120 ARGS 3)
target_compile_definitions(fuzz_gguf_driver PRIVATE LLB_FUZZ_STANDALONE_DRIVER)

# fuzz_gguf: the libFuzzer target (-DLLB_FUZZ=ON, tests/fuzz/README.md).
llb_add_fuzzer(fuzz_gguf SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_gguf.c LIBS llmbus_model)
