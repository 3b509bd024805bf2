# Input / output processor unit tests. They load the GPT-2
# vocab of the shared tokenizer vectors by path and skip (77) when it is absent.
llb_add_test(test_input_processor SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_input_processor.c
             LIBS llmbus_input_processor_core llmbus_kv_step PkgConfig::CMOCKA m LABELS unit TIMEOUT 60)
llb_add_test(test_chat_render SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_chat_render.c
             LIBS llmbus_input_processor_core PkgConfig::CMOCKA LABELS unit TIMEOUT 60)
llb_add_test(test_detokenizer SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_detokenizer.c
             LIBS llmbus_output_processor_core PkgConfig::CMOCKA LABELS unit TIMEOUT 60)
llb_add_test(test_stop_strings SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_stop_strings.c
             LIBS llmbus_output_processor_core PkgConfig::CMOCKA LABELS unit TIMEOUT 60)
llb_add_test(test_output_processor SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_output_processor.c
             LIBS llmbus_output_processor_core PkgConfig::CMOCKA m LABELS unit TIMEOUT 60)
# End of generation: the tokenizer's EOG set, the input processor's stop ids, the scheduler's
# stop check, on vocabularies written by the GGUF writer (no files needed).
llb_add_test(test_tokenizer_eog SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_eog.c
             LIBS llmbus_input_processor_core llmbus_scheduler_core llmbus_test_gguf_writer
                  PkgConfig::CMOCKA LABELS unit TIMEOUT 60)
# Engine routing in the input processor (several engines behind one subject) and the engine
# named in request ids, which aborts follow.
llb_add_test(test_engine_router SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_router.c
             LIBS llmbus_input_processor_actor PkgConfig::CMOCKA m LABELS unit TIMEOUT 60)
# Its load balance under bursts through several input processors (each seeing its own sends).
llb_add_test(test_engine_router_balance SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_router_balance.c
             LIBS llmbus_input_processor_actor PkgConfig::CMOCKA m LABELS unit TIMEOUT 60)
# Conditional disaggregation: prompt length less the cached prefix, the prefill pool's queue, the
# KV transfer against recomputing.
llb_add_test(test_pd_decision SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_pd_decision.c
             LIBS llmbus_input_processor_actor PkgConfig::CMOCKA m LABELS unit TIMEOUT 60)
llb_add_test(test_request_metrics SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_request_metrics.c
             LIBS llmbus_output_processor_core PkgConfig::CMOCKA m LABELS unit TIMEOUT 60)
# Fair intake: per-tenant queues in deficit round robin, bounds, the workers' share.
llb_add_test(test_intake_queue SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_intake_queue.c
             LIBS llmbus_input_processor_core PkgConfig::CMOCKA Threads::Threads LABELS unit TIMEOUT 60)
# The intake threads: every queued item done, a costly item's thread demoted and replaced.
llb_add_test(test_intake_workers SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_intake_workers.c
             LIBS llmbus_input_processor_core PkgConfig::CMOCKA Threads::Threads LABELS unit TIMEOUT 120)
# Per-tenant limits of the input processor: in flight, queued, token bucket.
llb_add_test(test_tenant_limits SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tenant_limits.c
             LIBS llmbus_input_processor_core PkgConfig::CMOCKA m LABELS unit TIMEOUT 60)
# LoRA adapters per tenant as the front doors resolve them (schemas/lora_registry.h, loras= of the
# tenants file).
llb_add_test(test_lora_registry SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lora_registry.c
             LIBS llmbus_input_processor_core llmbus_lora_registry PkgConfig::CMOCKA LABELS unit)
# Images in chat messages: marker expansion, is_embed masks, mm_hash, bad files (mm_images.h).
llb_add_test(test_mm_images SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_mm_images.c
             LIBS llmbus_input_processor_core llmbus_test_gguf_writer PkgConfig::CMOCKA LABELS unit TIMEOUT 60)
