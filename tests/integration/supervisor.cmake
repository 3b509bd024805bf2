# cmd/supervisor + cmd/serve: compiled into the test directly (cmd/CMakeLists.txt is the
# lead's); children are /bin/sleep and /bin/sh, plus a real embedded nats-server.
llb_add_test(test_supervisor
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_supervisor.c ${CMAKE_SOURCE_DIR}/cmd/supervisor.c
                     ${CMAKE_SOURCE_DIR}/cmd/serve.c
             LIBS llmbus_bus llmbus_nats_test_server PkgConfig::CMOCKA Threads::Threads
             LABELS integration supervisor TIMEOUT 180)
