# bus/ tests: pure subject/trace logic, and the runtime against a real nats-server that each
# test starts itself (tests/integration/nats_test_server.{c,h}, reusable by other areas).
add_library(llmbus_nats_test_server STATIC ${CMAKE_CURRENT_LIST_DIR}/nats_test_server.c)
target_include_directories(llmbus_nats_test_server PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_nats_test_server PUBLIC llmbus_bus PkgConfig::CMOCKA)

llb_add_test(test_bus_subject_trace SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bus_subject_trace.c
             LIBS llmbus_bus PkgConfig::CMOCKA LABELS unit bus)
llb_add_test(test_bus_messaging SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bus_messaging.c
             LIBS llmbus_bus llmbus_nats_test_server PkgConfig::CMOCKA Threads::Threads
             LABELS integration bus TIMEOUT 180)
llb_add_test(test_bus_reconnect SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bus_reconnect.c
             LIBS llmbus_bus llmbus_nats_test_server PkgConfig::CMOCKA Threads::Threads
             LABELS integration bus TIMEOUT 180)
llb_add_test(test_bus_drain SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bus_drain.c
             LIBS llmbus_bus llmbus_nats_test_server PkgConfig::CMOCKA PkgConfig::LIBEVENT
                  Threads::Threads
             LABELS integration bus TIMEOUT 180)
llb_add_test(test_bus_tracing SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bus_tracing.c
             LIBS llmbus_bus llmbus_nats_test_server PkgConfig::CMOCKA PkgConfig::JANSSON Threads::Threads
             LABELS integration bus TIMEOUT 180)
llb_add_test(test_bus_jetstream SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bus_jetstream.c
             LIBS llmbus_bus llmbus_nats_test_server PkgConfig::CMOCKA Threads::Threads
             LABELS integration bus TIMEOUT 180)
