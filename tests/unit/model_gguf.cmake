# GGUF reader, GGML quant types, LLaMA config.
# llmbus_test_gguf_writer: builds tiny GGUF files for any module's tests
# (#include "tests/unit/gguf_writer.h", link llmbus_test_gguf_writer).
add_library(llmbus_test_gguf_writer STATIC ${CMAKE_CURRENT_LIST_DIR}/gguf_writer.c)
target_include_directories(llmbus_test_gguf_writer PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_test_gguf_writer PUBLIC llmbus_base llmbus_kernels_quant)

llb_add_test(test_gguf SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf.c
             LIBS llmbus_model llmbus_test_gguf_writer PkgConfig::CMOCKA LABELS unit)
# the same program on the default model; exits 77 (skipped) when it is absent
add_test(NAME test_gguf_default_model COMMAND test_gguf --model ${LLB_DEFAULT_MODEL})
set_tests_properties(test_gguf_default_model PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77
                     LABELS unit)

llb_add_test(test_quant SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quant.c
             LIBS llmbus_kernels_quant PkgConfig::CMOCKA LABELS unit
             ARGS ${CMAKE_CURRENT_LIST_DIR}/data/quant_vectors.bin)

llb_add_test(test_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config.c
             LIBS llmbus_model llmbus_test_gguf_writer PkgConfig::CMOCKA LABELS unit)
add_test(NAME test_config_default_model COMMAND test_config --model ${LLB_DEFAULT_MODEL})
set_tests_properties(test_config_default_model PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77
                     LABELS unit)
