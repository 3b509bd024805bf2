# Codec tests of schemas/.
llb_add_test(test_codec_roundtrip
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_codec_roundtrip.c
                     ${CMAKE_CURRENT_LIST_DIR}/test_codec_samples.c
             LIBS llmbus_schemas PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_codec_reject
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_codec_reject.c
                     ${CMAKE_CURRENT_LIST_DIR}/test_codec_samples.c
             LIBS llmbus_schemas PkgConfig::CMOCKA LABELS unit TIMEOUT 300)
llb_add_test(test_codec_kv_transfer
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_codec_kv_transfer.c
             LIBS llmbus_schemas PkgConfig::CMOCKA LABELS unit)
