# Api server end to end: the Python tests start `llmbus serve` with the
# default model on a free port themselves (tests/e2e/api_stack.py) and use the venv made by
# `make venv` (ops/requirements-test.txt: openai). Without the venv, a binary or the model
# they print the reason and exit 77 (skipped).
set(llb_api_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
foreach(t test_openai_client test_openai_vllm_api test_http_hostile test_api_disconnect
          test_api_health_recovery test_tracing test_openai_structured_output
          test_chat_template_jinja test_openai_tools test_api_output_processor_restart
          test_openai_reasoning test_openai_responses)
  add_test(NAME api_${t}
           COMMAND sh -c "if [ ! -x '${llb_api_py}' ]; then echo 'SKIP: ${llb_api_py} missing (make venv)'; exit 77; fi; exec '${llb_api_py}' '${CMAKE_CURRENT_LIST_DIR}/${t}.py'")
  set_tests_properties(api_${t} PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "e2e;api"
                       RUN_SERIAL TRUE
                       ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
endforeach()
# --device sim (actors/gpu_worker/runner_sim.h): two sim engines, replays, preemption, refusals.
# Short (no weights computed): well under a minute.
add_test(NAME e2e_test_sim_device
         COMMAND sh -c "if [ ! -x '${llb_api_py}' ]; then echo 'SKIP: ${llb_api_py} missing (make venv)'; exit 77; fi; exec '${llb_api_py}' '${CMAKE_CURRENT_LIST_DIR}/test_sim_device.py'")
set_tests_properties(e2e_test_sim_device PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "e2e;sim"
                     RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
# LoRA adapters (issue 35): two random adapters (tests/tools/make_lora.py) on the default model over
# HTTP and NATS; batch invariance across adapters; unknown adapter 404.
add_test(NAME api_test_lora_serve
         COMMAND sh -c "if [ ! -x '${llb_api_py}' ]; then echo 'SKIP: ${llb_api_py} missing (make venv)'; exit 77; fi; exec '${llb_api_py}' \"$0\" \"$@\""
                 ${CMAKE_CURRENT_LIST_DIR}/test_lora_serve.py --pydir ${LLB_SCHEMAS_PYTHON_DIR})
set_tests_properties(api_test_lora_serve PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "e2e;api" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
