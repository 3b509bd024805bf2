# Multimodal "embeds" items end to end on the default model (in one process, every boundary
# that carries item data crossed in its wire form). Skips without the model locally.
if(TARGET llmbus_gpu_worker AND TARGET llmbus_scheduler_actor AND TARGET llmbus_encoder_cache)
  llb_add_test(test_mm_embeds SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_mm_embeds.c
               LIBS llmbus_scheduler_actor llmbus_kv_manager llmbus_encoder_cache llmbus_gpu_worker
                    llmbus_model PkgConfig::CMOCKA
               LABELS e2e TIMEOUT 600 ARGS ${LLB_DEFAULT_MODEL})
endif()

# The same over a real nats-server with every actor a process (tests/e2e/stack.c): item vs
# inline text, chunked prefill over the item, shared item counted once in SchedulerStats.
if(TARGET llmbus_e2e_stack AND TARGET llmbus-encoder-cache)
  llb_add_test(test_mm_bus SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_mm_bus.c
               LIBS llmbus_e2e_stack llmbus_model llmbus_kernels_quant PkgConfig::CMOCKA
               LABELS e2e multimodal TIMEOUT 600 ARGS ${LLB_DEFAULT_MODEL})
  add_dependencies(test_mm_bus llmbus llmbus-kv-manager llmbus-scheduler llmbus-gpu-worker
                   llmbus-input-processor llmbus-output-processor llmbus-encoder-cache)
  set_tests_properties(test_mm_bus PROPERTIES RUN_SERIAL TRUE)
endif()
