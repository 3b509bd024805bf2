# Jinja interpreter fuzzing (model/template/jinja.h): the standalone mutation driver under ctest
# (~3 s, any compiler), and the libFuzzer target `fuzz_jinja` (-DLLB_FUZZ=ON, `make fuzz`;
# corpus tests/fuzz/corpus/fuzz_jinja/).
llb_add_test(fuzz_jinja_driver SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_jinja.c
             LIBS llmbus_template LABELS fuzz TIMEOUT 120 ARGS 3)
target_compile_definitions(fuzz_jinja_driver PRIVATE LLB_FUZZ_STANDALONE_DRIVER)
llb_add_fuzzer(fuzz_jinja SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_jinja.c LIBS llmbus_template)
