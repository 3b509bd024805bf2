# llmbus-bench serve against a fake OpenAI SSE server inside the test.
if(TARGET llmbus-bench)
  llb_add_test(test_bench_serve SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bench_serve.c
               LIBS llmbus_bench_core PkgConfig::JANSSON PkgConfig::CMOCKA Threads::Threads m
               LABELS integration bench TIMEOUT 60)
  add_dependencies(test_bench_serve llmbus-bench)
endif()
