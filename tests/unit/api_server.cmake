# Api server pure logic (owner: api engineer): request parsing/validation, response and SSE
# rendering, Prometheus text. No network.
if(TARGET llmbus_api_server_core)
  foreach(t test_api_request test_api_response test_api_metrics test_api_keys test_api_delta)
    llb_add_test(${t} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${t}.c
                 LIBS llmbus_api_server_core PkgConfig::JANSSON PkgConfig::CMOCKA m LABELS unit api TIMEOUT 60)
  endforeach()
endif()
