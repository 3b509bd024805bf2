# Attacks on `llmbus serve` in its locked-down mode (tests/security/README.md): NATS accounts
# and permissions, API keys. Python (nats-py + flatc's Python output) from the venv that
# `make venv` creates; without it, a binary or the model the test prints why and exits 77.
set(llb_security_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
add_test(NAME security_attacks_fail_against_serve
         COMMAND sh -c "if [ ! -x '${llb_security_py}' ]; then echo 'SKIP: ${llb_security_py} missing (make venv)'; exit 77; fi; exec '${llb_security_py}' \"$0\" \"$@\""
                 ${CMAKE_CURRENT_LIST_DIR}/test_security.py --pydir ${LLB_SCHEMAS_PYTHON_DIR})
set_tests_properties(security_attacks_fail_against_serve PROPERTIES
                     TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "e2e;security" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
# LoRA adapters restricted to tenants (loras= of the tenants file): another tenant's adapter is an
# unknown model over HTTP and NATS and is not listed in /v1/models.
add_test(NAME security_lora_adapters_belong_to_their_tenants
         COMMAND sh -c "if [ ! -x '${llb_security_py}' ]; then echo 'SKIP: ${llb_security_py} missing (make venv)'; exit 77; fi; exec '${llb_security_py}' \"$0\" \"$@\""
                 ${CMAKE_CURRENT_LIST_DIR}/test_lora_tenants.py --pydir ${LLB_SCHEMAS_PYTHON_DIR})
set_tests_properties(security_lora_adapters_belong_to_their_tenants PROPERTIES
                     TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "e2e;security" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
# LoRA adapters loaded at run time (/v1/load_lora_adapter, /v1/unload_lora_adapter, --lora-dir):
# behind the key, the loader's tenant's only, confined to the directory (one text for outside,
# link and missing), answers as --lora-modules; a tenant cannot publish on <prefix>.lora.update.
add_test(NAME security_lora_load_unload_at_run_time
         COMMAND sh -c "if [ ! -x '${llb_security_py}' ]; then echo 'SKIP: ${llb_security_py} missing (make venv)'; exit 77; fi; exec '${llb_security_py}' \"$0\" \"$@\""
                 ${CMAKE_CURRENT_LIST_DIR}/test_lora_load.py --pydir ${LLB_SCHEMAS_PYTHON_DIR})
set_tests_properties(security_lora_load_unload_at_run_time PROPERTIES
                     TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "e2e;security" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
# A tenant's HTTP request rate (requests_per_s / burst_requests in the tenants file): over it, a
# 429 with Retry-After from the request's headers, its body never read; other tenants unaffected.
add_test(NAME security_request_rate_refused_on_headers
         COMMAND sh -c "if [ ! -x '${llb_security_py}' ]; then echo 'SKIP: ${llb_security_py} missing (make venv)'; exit 77; fi; exec '${llb_security_py}' \"$0\" \"$@\""
                 ${CMAKE_CURRENT_LIST_DIR}/test_request_rate.py --pydir ${LLB_SCHEMAS_PYTHON_DIR})
set_tests_properties(security_request_rate_refused_on_headers PROPERTIES
                     TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "e2e;security" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
