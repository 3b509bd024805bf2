# The command line a vLLM / llama.cpp user types, end to end (tests/e2e/test_cli_vllm_flags.py:
# serve --help round trips through --dry-run and every actor's parser, aliases, --flag=value,
# --config YAML, then a real `llmbus serve MODEL --host --port --served-model-name a b
# --api-key K` under the openai client; test_connection_file.py: serve + chat / generate /
# status / tokenize finding it by its connection file, chat --url over HTTP, in a pty).
# Without the venv, a binary or the model they print the reason and exit 77 (skipped).
set(llb_cli_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
foreach(t test_cli_vllm_flags test_connection_file)
  add_test(NAME cli_${t}
           COMMAND sh -c "if [ ! -x '${llb_cli_py}' ]; then echo 'SKIP: ${llb_cli_py} missing (make venv)'; exit 77; fi; exec '${llb_cli_py}' '${CMAKE_CURRENT_LIST_DIR}/${t}.py'")
  set_tests_properties(cli_${t} PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "e2e;cli" RUN_SERIAL TRUE
                       ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
endforeach()
