# `cmake --install` into a temporary prefix, then the installed `llmbus serve` and a C program
# built against the installed libllmbus-client (tests/e2e/test_install.sh).
add_test(NAME test_install_into_prefix
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_install.sh ${CMAKE_BINARY_DIR} ${LLB_DEFAULT_MODEL} ${LLB_SANITIZE})
set_tests_properties(test_install_into_prefix PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "e2e;install"
                     RUN_SERIAL TRUE)
