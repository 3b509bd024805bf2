# Model runner (actors/gpu_worker/model_runner.c): persistent batch, slot mapping, batch
# invariance under chunking and preemption, error statuses.
llb_add_test(test_model_runner SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_runner.c
             LIBS llmbus_gpu_worker llmbus_test_gguf_writer PkgConfig::CMOCKA
             LABELS unit TIMEOUT 120)
# Structured output in the worker (actors/gpu_worker/runner_so.c): mask application, grammar
# cache, matcher sync.
llb_add_test(test_runner_so SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_runner_so.c
             LIBS llmbus_gpu_worker PkgConfig::CMOCKA LABELS unit TIMEOUT 60)
# Pooling (vLLM's embed task): vectors against llama_forward's hidden states, chunking and
# batch invariance, refusals (actors/gpu_worker/pooler.c through the runner).
llb_add_test(test_model_runner_pooling SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_runner_pooling.c
             LIBS llmbus_gpu_worker llmbus_test_gguf_writer PkgConfig::CMOCKA
             LABELS unit TIMEOUT 120)
llb_add_test(test_pooler SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_pooler.c
             LIBS llmbus_gpu_worker PkgConfig::CMOCKA LABELS unit)
# Prompt logprobs of a worker step (actors/gpu_worker/prompt_logprobs.c).
llb_add_test(test_prompt_logprobs SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_prompt_logprobs.c
             LIBS llmbus_gpu_worker PkgConfig::CMOCKA m LABELS unit TIMEOUT 60)
# --device sim's step-time model, its fit and file, and its tokens (actors/gpu_worker/runner_sim.c).
llb_add_test(test_runner_sim SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_runner_sim.c
             LIBS llmbus_runner_sim PkgConfig::CMOCKA m LABELS unit TIMEOUT 60)
# LoRA adapters in the worker (model_runner_set_loras): per-request adapters in one batch equal
# each request alone, an unknown adapter fails only its request.
llb_add_test(test_model_runner_lora SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_runner_lora.c
             ${CMAKE_CURRENT_LIST_DIR}/arch_models.c ${CMAKE_CURRENT_LIST_DIR}/lora_models.c
             LIBS llmbus_gpu_worker llmbus_test_gguf_writer PkgConfig::CMOCKA m
             LABELS unit TIMEOUT 120)
# --lora-modules values and lora_int_id (actors/gpu_worker/lora_modules.c).
llb_add_test(test_lora_modules SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lora_modules.c
             LIBS llmbus_lora_modules PkgConfig::CMOCKA LABELS unit)
# The KV connector's export registry (actors/gpu_worker/kv_export.c, issue 36): listed blocks only,
# limits, duplicates, expiry, tombstones.
llb_add_test(test_kv_export SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_export.c
             LIBS llmbus_gpu_worker PkgConfig::CMOCKA LABELS unit)
