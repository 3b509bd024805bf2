llb_add_test(test_status SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_status.c
             LIBS llmbus_base PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_peer_watch SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_peer_watch.c
             LIBS llmbus_bus PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_metrics SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_metrics.c
             LIBS llmbus_base PkgConfig::CMOCKA m LABELS unit)
llb_add_test(test_metrics_merge SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_metrics_merge.c
             LIBS llmbus_base PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_metrics_http SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_metrics_http.c
             LIBS llmbus_bus PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_base_containers SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_base_containers.c
             LIBS llmbus_base PkgConfig::CMOCKA LABELS unit)
llb_add_test(test_progress SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_progress.c
             LIBS llmbus_base PkgConfig::CMOCKA LABELS unit)
