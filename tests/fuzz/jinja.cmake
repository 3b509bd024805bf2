# Jinja interpreter fuzzing (model/jinja.h): the standalone mutation driver under ctest
# (~3 s, any compiler); with -DLLB_FUZZ=ON and clang a libFuzzer binary `fuzz_jinja`
# (build-dir/tests/fuzz_jinja -max_total_time=60).
llb_add_test(fuzz_jinja_driver SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_jinja.c
             LIBS llmbus_jinja LABELS fuzz TIMEOUT 120 ARGS 3)
target_compile_definitions(fuzz_jinja_driver PRIVATE LLB_FUZZ_STANDALONE_DRIVER)
if(LLB_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_jinja ${CMAKE_CURRENT_LIST_DIR}/fuzz_jinja.c)
  target_include_directories(fuzz_jinja PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_options(fuzz_jinja PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_jinja PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_jinja PRIVATE llmbus_jinja)
endif()
