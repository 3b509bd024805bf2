# Model runner (actors/gpu_worker/model_runner.c): persistent batch, slot mapping, batch
# invariance under chunking and preemption, error statuses (worker engineer).
llb_add_test(test_model_runner SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_runner.c
             LIBS llmbus_gpu_worker llmbus_test_gguf_writer PkgConfig::CMOCKA
             LABELS unit TIMEOUT 120)
# Structured output in the worker (actors/gpu_worker/runner_so.c): mask application, grammar
# cache, matcher sync (worker engineer).
llb_add_test(test_runner_so SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_runner_so.c
             LIBS llmbus_gpu_worker PkgConfig::CMOCKA LABELS unit TIMEOUT 60)
