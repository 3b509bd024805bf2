# Model runner (actors/gpu_worker/model_runner.c): persistent batch, slot mapping, batch
# invariance under chunking and preemption, error statuses (worker engineer).
llb_add_test(test_model_runner SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_runner.c
             LIBS llmbus_gpu_worker llmbus_test_gguf_writer PkgConfig::CMOCKA
             LABELS unit TIMEOUT 120)
# Prompt logprobs of a worker step (actors/gpu_worker/prompt_logprobs.c).
llb_add_test(test_prompt_logprobs SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_prompt_logprobs.c
             LIBS llmbus_gpu_worker PkgConfig::CMOCKA m LABELS unit TIMEOUT 60)
