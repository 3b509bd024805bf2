# Api server pure logic: request parsing/validation, response and SSE
# rendering, the api server's metrics (base/metrics renders and merges them). No network.
if(TARGET llmbus_api_server_core)
  foreach(t test_api_request test_api_response test_api_metrics test_api_keys test_api_delta test_tool_parser
            test_api_cors test_api_images test_api_options)
    llb_add_test(${t} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${t}.c
                 LIBS llmbus_api_server_core PkgConfig::JANSSON PkgConfig::CMOCKA m LABELS unit api TIMEOUT 60)
  endforeach()
  # tool_choice required / named schemas against the grammar engine the worker masks with
  if(TARGET llmbus_structured_output)
    llb_add_test(test_api_tools SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_api_tools.c
                 LIBS llmbus_api_server_core llmbus_structured_output PkgConfig::JANSSON PkgConfig::CMOCKA m
                 LABELS unit api TIMEOUT 60)
  endif()
endif()
# The listener's connection policing (http_guard.h) on a real evhttp on loopback: the API key
# checked on the headers before the body, the connection limit.
if(TARGET llmbus_api_server)
  llb_add_test(test_http_guard SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_http_guard.c
               LIBS llmbus_api_server PkgConfig::LIBEVENT PkgConfig::CMOCKA Threads::Threads LABELS unit api TIMEOUT 120)
  llb_add_test(test_api_listen_warning SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_api_listen_warning.c
               LIBS llmbus_api_server PkgConfig::CMOCKA LABELS unit api TIMEOUT 60)
endif()
