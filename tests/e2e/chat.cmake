# `llmbus chat` on a pseudo-terminal against `llmbus serve` with the real model:
# Ctrl-C aborts an answer, history, Ctrl-D ends. Python's standard library only (pty).
add_test(NAME e2e_chat_pty
         COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/test_chat_pty.py)
set_tests_properties(e2e_chat_pty PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "e2e;cli" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
