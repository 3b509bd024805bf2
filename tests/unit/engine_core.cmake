# Engine core: kv_manager and scheduler pure logic (actors/kv_manager, actors/scheduler).
llb_add_test(test_kv_block_pool SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_block_pool.c
             LIBS llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_kv_manager SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_manager.c
             LIBS llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_scheduler SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler.c
             LIBS llmbus_scheduler_core llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_sched_fair SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sched_fair.c
             LIBS llmbus_scheduler_core llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_scheduler_stop SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_stop.c
             LIBS llmbus_scheduler_core llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_scheduler_async SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_async.c
             LIBS llmbus_scheduler_core llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_engine_metrics SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_metrics.c
             LIBS llmbus_scheduler_core PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_scheduler_pooling SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_pooling.c
             LIBS llmbus_scheduler_core llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_scheduler_lora SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_lora.c
             LIBS llmbus_scheduler_core llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_scheduler_spec SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_spec.c
             LIBS llmbus_scheduler_core llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_scheduler_options SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_options.c
             ${CMAKE_CURRENT_LIST_DIR}/random_llama.c ${CMAKE_CURRENT_LIST_DIR}/gguf_writer.c
             LIBS llmbus_scheduler_options PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_scheduler_blocks SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_blocks.c
             LIBS llmbus_scheduler_core llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_scheduler_handoff SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_handoff.c
             LIBS llmbus_scheduler_core llmbus_kv_manager PkgConfig::CMOCKA LABELS unit)
