# Progress on a terminal only (tests/e2e/test_progress_pty.py: `llmbus perplexity` on a pty).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME test_progress_shows_on_a_terminal_only
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_progress_pty.py
                   ${CMAKE_BINARY_DIR}/cmd/llmbus ${LLB_DEFAULT_MODEL})
  set_tests_properties(test_progress_shows_on_a_terminal_only PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                       LABELS e2e)
endif()
