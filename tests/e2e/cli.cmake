# The command line a vLLM / llama.cpp user types, end to end. test_cli_vllm_flags.py (the
# venv's openai): serve --help round trips through --dry-run and every actor's parser, aliases,
# --flag=value, --config YAML, a failed start's log, then a real `llmbus serve MODEL --host
# --port --served-model-name a b --api-key K` under the openai client. test_connection_file.py
# (standard library, a pty): serve + chat / generate / status / tokenize finding it by its
# connection file, --connect, chat --url over HTTP. test_every_command_parses_flags.py (no model):
# --help, unknown flags, --flag=value and --flag value, a missing value and `--`, for every
# llmbus command, actor and benchmark. Without the venv, a binary or the model they
# print the reason and exit 77 (skipped).
set(llb_cli_env "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
set(llb_cli_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
add_test(NAME cli_test_cli_vllm_flags
         COMMAND sh -c "if [ ! -x '${llb_cli_py}' ]; then echo 'SKIP: ${llb_cli_py} missing (make venv)'; exit 77; fi; exec '${llb_cli_py}' '${CMAKE_CURRENT_LIST_DIR}/test_cli_vllm_flags.py'")
add_test(NAME cli_test_connection_file COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/test_connection_file.py)
add_test(NAME cli_test_every_command_parses_flags COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/test_every_command_parses_flags.py)
set_tests_properties(cli_test_every_command_parses_flags PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli"
                     ENVIRONMENT "${llb_cli_env}")
set_tests_properties(cli_test_cli_vllm_flags cli_test_connection_file PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
                     LABELS "e2e;cli" RUN_SERIAL TRUE ENVIRONMENT "${llb_cli_env}")
