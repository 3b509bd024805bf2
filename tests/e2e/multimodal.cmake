# Multimodal "embeds" items end to end on the default model (in one process, every boundary
# that carries item data crossed in its wire form). Skips without the model locally.
if(TARGET llmbus_gpu_worker AND TARGET llmbus_scheduler_actor AND TARGET llmbus_encoder_cache)
  llb_add_test(test_mm_embeds SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_mm_embeds.c
               LIBS llmbus_scheduler_actor llmbus_kv_manager llmbus_encoder_cache llmbus_gpu_worker
                    llmbus_model PkgConfig::CMOCKA
               LABELS e2e TIMEOUT 600 ARGS ${LLB_DEFAULT_MODEL})
endif()
