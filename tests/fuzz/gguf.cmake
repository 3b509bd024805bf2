# GGUF reader fuzzing (gguf engineer).
# fuzz_gguf_driver: deterministic mutation driver (truncations + seeded byte flips of files
# made by the test GGUF writer), any compiler, runs under ctest for ~3 s.
llb_add_test(fuzz_gguf_driver SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_gguf.c
             LIBS llmbus_model llmbus_test_gguf_writer LABELS fuzz TIMEOUT 120 ARGS 3)
target_compile_definitions(fuzz_gguf_driver PRIVATE LLB_FUZZ_STANDALONE_DRIVER)

# fuzz_gguf: libFuzzer target, configure with CC=clang CXX=clang++ -DLLB_FUZZ=ON, run
#   build-dir/tests/fuzz_gguf -max_total_time=60
option(LLB_FUZZ "Build libFuzzer targets (needs clang)" OFF)
if(LLB_FUZZ)
  if(CMAKE_C_COMPILER_ID MATCHES "Clang")
    add_executable(fuzz_gguf ${CMAKE_CURRENT_LIST_DIR}/fuzz_gguf.c
                   ${CMAKE_SOURCE_DIR}/model/gguf.c ${CMAKE_SOURCE_DIR}/model/config.c
                   ${CMAKE_SOURCE_DIR}/kernels/quant.c)
    target_include_directories(fuzz_gguf PRIVATE ${CMAKE_SOURCE_DIR})
    target_compile_options(fuzz_gguf PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(fuzz_gguf PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_gguf PRIVATE llmbus_base m)
  else()
    message(WARNING "LLB_FUZZ=ON needs clang (CC=clang): fuzz_gguf is not built")
  endif()
endif()
