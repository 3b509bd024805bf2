# Engine end to end: the real model (LLB_DEFAULT_MODEL) through every
# actor over a real nats-server, started by tests/e2e/stack.c (`llmbus serve`, or the actor
# binaries themselves when a test needs actor flags). Locally a missing model skips (77);
# under CI=true it fails. RUN_SERIAL: each test runs a whole engine on a 2-core machine.
if(TARGET llmbus_nats_test_server AND TARGET llmbus)
  add_library(llmbus_e2e_stack STATIC ${CMAKE_CURRENT_LIST_DIR}/stack.c)
  target_include_directories(llmbus_e2e_stack PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(llmbus_e2e_stack PUBLIC llmbus_bus llmbus_schemas llmbus_nats_test_server
                        Threads::Threads)
  foreach(t test_engine_concurrent_matches_alone test_engine_prefix_cache test_engine_abort
            test_engine_prompt_too_long test_engine_malformed test_engine_preemption test_run_cli
            test_engine_kv_geometry test_engine_poison test_engine_actor_kill test_engine_scale_out
            test_engine_spec_decode test_engine_pd_disagg)
    if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/${t}.c)
      llb_add_test(${t} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${t}.c
                   LIBS llmbus_e2e_stack PkgConfig::CMOCKA PkgConfig::JANSSON
                   LABELS e2e engine TIMEOUT 900
                   ARGS ${LLB_DEFAULT_MODEL})
      add_dependencies(${t} llmbus llmbus-kv-manager llmbus-scheduler llmbus-gpu-worker
                       llmbus-input-processor llmbus-output-processor llmbus-api-server)
      set_tests_properties(${t} PROPERTIES RUN_SERIAL TRUE)
      if(TARGET llmbus-encoder-cache)
        add_dependencies(${t} llmbus-encoder-cache)
      endif()
    endif()
  endforeach()
  # The kill test with synchronous scheduling (one step in flight instead of two).
  llb_add_test(test_engine_actor_kill_sync SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_actor_kill.c
               LIBS llmbus_e2e_stack PkgConfig::CMOCKA
               LABELS e2e engine TIMEOUT 900
               ARGS ${LLB_DEFAULT_MODEL} sync)
  add_dependencies(test_engine_actor_kill_sync llmbus llmbus-kv-manager llmbus-scheduler
                   llmbus-gpu-worker llmbus-input-processor llmbus-output-processor llmbus-api-server)
  set_tests_properties(test_engine_actor_kill_sync PROPERTIES RUN_SERIAL TRUE)
  # The same check with a 64-token step budget: chunked prefills mixed with decodes.
  llb_add_test(test_engine_chunked_prefill_matches_alone
               SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_concurrent_matches_alone.c
               LIBS llmbus_e2e_stack PkgConfig::CMOCKA
               LABELS e2e engine TIMEOUT 900
               ARGS ${LLB_DEFAULT_MODEL} chunked)
  add_dependencies(test_engine_chunked_prefill_matches_alone llmbus llmbus-kv-manager llmbus-scheduler
                   llmbus-gpu-worker llmbus-input-processor llmbus-output-processor llmbus-api-server)
  set_tests_properties(test_engine_chunked_prefill_matches_alone PROPERTIES RUN_SERIAL TRUE)
  if(TARGET llmbus-encoder-cache)
    add_dependencies(test_engine_chunked_prefill_matches_alone llmbus-encoder-cache)
  endif()
endif()
