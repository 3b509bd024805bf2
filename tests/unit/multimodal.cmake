# Multimodal: encoder-cache accounting (schemas/encoder_ops + actors/encoder_cache), the
# scheduler's encoder budgeting, the worker's encoder-output cache, item hashing.
if(TARGET llmbus_encoder_cache)
  llb_add_test(test_encoder_cache SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_encoder_cache.c
               LIBS llmbus_encoder_cache PkgConfig::CMOCKA LABELS unit)
endif()
if(TARGET llmbus_scheduler_core)
  llb_add_test(test_scheduler_encoder SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_encoder.c
               LIBS llmbus_scheduler_core llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
endif()
if(TARGET llmbus_input_processor_core)
  llb_add_test(test_inproc_mm_hash SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_inproc_mm_hash.c
               LIBS llmbus_input_processor_core PkgConfig::CMOCKA LABELS unit)
endif()
