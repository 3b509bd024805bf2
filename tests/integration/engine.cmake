# Engine actors (kv_manager, scheduler) as processes against a real nats-server.
llb_add_test(test_engine_kv SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_kv.c
             LIBS llmbus_bus llmbus_schemas llmbus_nats_test_server PkgConfig::CMOCKA
                  Threads::Threads
             LABELS integration engine TIMEOUT 180)
add_dependencies(test_engine_kv llmbus-kv-manager)
llb_add_test(test_engine_scheduler SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_scheduler.c
             LIBS llmbus_bus llmbus_schemas llmbus_nats_test_server PkgConfig::CMOCKA
                  Threads::Threads
             LABELS integration engine TIMEOUT 180)
add_dependencies(test_engine_scheduler llmbus-scheduler llmbus-kv-manager)
