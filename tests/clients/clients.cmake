# Other-language clients against the running system. The Python test needs the venv that
# `make venv` creates (${CMAKE_SOURCE_DIR}/.venv, from ops/requirements-test.txt) and the
# Python package flatc generates (target llmbus_schemas_py); without the venv it skips (77).
add_executable(cross_responder ${CMAKE_CURRENT_LIST_DIR}/cross_responder.c)
target_link_libraries(cross_responder PRIVATE llmbus_bus llmbus_schemas)
target_include_directories(cross_responder PRIVATE ${CMAKE_SOURCE_DIR})
add_dependencies(cross_responder llmbus_schemas_py)

set(llb_venv_python ${CMAKE_SOURCE_DIR}/.venv/bin/python)
add_test(NAME test_clients_python_generate_round_trip
         COMMAND /bin/sh -c "if [ ! -x '${llb_venv_python}' ]; then echo 'skipped: no venv at ${CMAKE_SOURCE_DIR}/.venv (run make venv)'; exit 77; fi; exec '${llb_venv_python}' \"$0\" \"$@\""
                 ${CMAKE_CURRENT_LIST_DIR}/test_cross_language.py
                 --responder $<TARGET_FILE:cross_responder>
                 --pydir ${LLB_SCHEMAS_PYTHON_DIR})
set_tests_properties(test_clients_python_generate_round_trip PROPERTIES
                     TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "clients;integration"
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR}")

# The Python client package (clients/python) as `make venv` installed it into the venv with pip,
# against a live `llmbus serve` with the default model (test_python_package.py).
add_test(NAME test_clients_python_package
         COMMAND /bin/sh -c "if [ ! -x '${llb_venv_python}' ]; then echo 'skipped: no venv at ${CMAKE_SOURCE_DIR}/.venv (run make venv)'; exit 77; fi; exec '${llb_venv_python}' \"$0\""
                 ${CMAKE_CURRENT_LIST_DIR}/test_python_package.py)
set_tests_properties(test_clients_python_package PROPERTIES
                     TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "clients;e2e" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
