# Decoder fuzzing for schemas/.
#  - Always: fuzz_driver.c runs the libFuzzer entry over fixed-seed mutations of the sample
#    messages for a few seconds under ctest (any compiler).
#  - -DLLB_FUZZ=ON with clang: the libFuzzer target fuzz_schemas_decoders (tests/fuzz/README.md).

set(llb_schemas_fuzz_sources
  ${CMAKE_CURRENT_LIST_DIR}/fuzz_decoders.c
  ${CMAKE_CURRENT_LIST_DIR}/../unit/test_codec_samples.c)

llb_add_test(fuzz_schemas_decoders_survive_mutations
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_driver.c ${llb_schemas_fuzz_sources}
             LIBS llmbus_schemas LABELS fuzz ARGS 200000 4 0x5eed TIMEOUT 120)

llb_add_fuzzer(fuzz_schemas_decoders SOURCES ${llb_schemas_fuzz_sources} LIBS llmbus_schemas)
