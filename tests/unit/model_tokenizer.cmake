# Tokenizer and chat template tests.
llb_add_test(test_tokenizer SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer.c
             LIBS llmbus_model PkgConfig::CMOCKA LABELS unit TIMEOUT 300
             ARGS ${LLB_TESTDATA_DIR}/tokenizer ${LLB_DEFAULT_MODEL})
llb_add_test(test_tokenizer_stream SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_stream.c
             LIBS llmbus_model PkgConfig::CMOCKA LABELS unit
             ARGS ${LLB_TESTDATA_DIR}/tokenizer)
llb_add_test(test_chat_template SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_chat_template.c
             LIBS llmbus_template PkgConfig::CMOCKA LABELS unit ARGS ${LLB_DEFAULT_MODEL})
