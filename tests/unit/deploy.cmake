# ops/deploy/'s systemd units: `systemd-analyze verify` accepts them, and every actor takes the
# flags its unit passes (test_deploy_units.py). Python 3, standard library only.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME test_deploy_units
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_deploy_units.py ${CMAKE_SOURCE_DIR}
                   ${CMAKE_BINARY_DIR})
  set_tests_properties(test_deploy_units PROPERTIES TIMEOUT 120 LABELS unit SKIP_RETURN_CODE 77
                       ENVIRONMENT "LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
endif()
