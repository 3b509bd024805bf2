# Decoder fuzzing for schemas/ (owned by the schemas area).
#  - Always: fuzz_driver.c runs the libFuzzer entry over fixed-seed mutations of the sample
#    messages for a few seconds under ctest (any compiler).
#  - -DLLB_FUZZ=ON with clang: a real libFuzzer binary `fuzz_schemas_decoders_libfuzzer`;
#    run it as `build/fuzz_schemas_decoders_libfuzzer -max_total_time=60`.
option(LLB_FUZZ "Build libFuzzer targets (needs clang)" OFF)

set(llb_schemas_fuzz_sources
  ${CMAKE_CURRENT_LIST_DIR}/fuzz_decoders.c
  ${CMAKE_CURRENT_LIST_DIR}/../unit/test_codec_samples.c)

llb_add_test(fuzz_schemas_decoders_survive_mutations
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_driver.c ${llb_schemas_fuzz_sources}
             LIBS llmbus_schemas LABELS fuzz ARGS 200000 4 0x5eed TIMEOUT 120)

if(LLB_FUZZ AND NOT (CMAKE_C_COMPILER_ID MATCHES "Clang" AND CMAKE_CXX_COMPILER_ID MATCHES "Clang"))
  message(WARNING "LLB_FUZZ=ON needs clang (CC=clang CXX=clang++): "
                  "fuzz_schemas_decoders_libfuzzer is not built")
elseif(LLB_FUZZ)
  target_compile_options(llmbus_schemas PRIVATE -fsanitize=fuzzer-no-link)
  add_executable(fuzz_schemas_decoders_libfuzzer ${llb_schemas_fuzz_sources})
  target_include_directories(fuzz_schemas_decoders_libfuzzer PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_options(fuzz_schemas_decoders_libfuzzer PRIVATE -fsanitize=fuzzer)
  target_link_libraries(fuzz_schemas_decoders_libfuzzer PRIVATE llmbus_schemas)
  target_link_options(fuzz_schemas_decoders_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
endif()
