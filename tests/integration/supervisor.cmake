# cmd/supervisor/ (supervisor.c, serve.c: library llmbus_supervisor); children are /bin/sleep and
# /bin/sh, plus a real embedded nats-server.
llb_add_test(test_supervisor
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_supervisor.c
             LIBS llmbus_supervisor llmbus_bus llmbus_nats_test_server PkgConfig::CMOCKA Threads::Threads
             LABELS integration supervisor TIMEOUT 180)
# cmd/supervisor/serve_nats_config: generated accounts, users and passwords on a real nats-server.
llb_add_test(test_serve_nats_config
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serve_nats_config.c
             LIBS llmbus_supervisor llmbus_bus PkgConfig::CMOCKA Threads::Threads
             LABELS integration supervisor TIMEOUT 60)
# cmd/supervisor/run_dir: private run directories, the sweep of a dead run's, --state-dir 0700.
llb_add_test(test_run_dir SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_run_dir.c
             LIBS llmbus_supervisor PkgConfig::CMOCKA LABELS integration supervisor TIMEOUT 60)
