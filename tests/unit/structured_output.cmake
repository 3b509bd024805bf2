# Structured output (model/structured/structured_output.h): the matcher on hand-picked cases
# (test_structured_output.c), and random walks under the mask validated by Python's
# jsonschema on the schema corpus in data/structured_output/ (test_structured_output.py,
# with the so_walk tool; the venv of `make venv` provides jsonschema).
# Reasoning markup (model/reasoning/reasoning.h): the split of outputs and the scan that starts a grammar.
llb_add_test(test_reasoning SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_reasoning.c
             LIBS llmbus_reasoning PkgConfig::CMOCKA LABELS unit TIMEOUT 60)
llb_add_test(test_structured_output SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_structured_output.c
             LIBS llmbus_structured_output PkgConfig::CMOCKA LABELS unit TIMEOUT 120)
llb_add_test(test_gbnf SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gbnf.c
             LIBS llmbus_structured_output PkgConfig::CMOCKA LABELS unit TIMEOUT 120)
add_executable(so_walk ${CMAKE_CURRENT_LIST_DIR}/so_walk.c)
target_link_libraries(so_walk PRIVATE llmbus_structured_output)
target_include_directories(so_walk PRIVATE ${CMAKE_SOURCE_DIR})
set(llb_so_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
add_test(NAME test_structured_output_walks
         COMMAND sh -c "if [ ! -x '${llb_so_py}' ]; then echo 'SKIP: ${llb_so_py} missing (make venv)'; exit 77; fi; exec '${llb_so_py}' '${CMAKE_CURRENT_LIST_DIR}/test_structured_output.py' '$<TARGET_FILE:so_walk>' '${CMAKE_CURRENT_LIST_DIR}/data' '${LLB_DEFAULT_MODEL}'")
set_tests_properties(test_structured_output_walks PROPERTIES TIMEOUT 600 LABELS unit SKIP_RETURN_CODE 77)
# JSON Schema coverage: hundreds of schemas (schema_corpus.py), walks and the mask's verdict on
# candidate texts against Python's jsonschema; two halves so that ctest runs them side by side.
foreach(llb_so_half first second)
  add_test(NAME test_schema_coverage_${llb_so_half}
           COMMAND sh -c "if [ ! -x '${llb_so_py}' ]; then echo 'SKIP: ${llb_so_py} missing (make venv)'; exit 77; fi; exec '${llb_so_py}' '${CMAKE_CURRENT_LIST_DIR}/test_schema_coverage.py' '$<TARGET_FILE:so_walk>' ${llb_so_half}")
  set_tests_properties(test_schema_coverage_${llb_so_half} PROPERTIES TIMEOUT 900 LABELS unit SKIP_RETURN_CODE 77)
endforeach()
# GBNF grammars: so_walk's walks and verdicts against Python's Lark (test_gbnf_walks.py with
# gbnf_ref.py; the venv of `make venv` provides lark).
add_test(NAME test_gbnf_walks
         COMMAND sh -c "if [ ! -x '${llb_so_py}' ]; then echo 'SKIP: ${llb_so_py} missing (make venv)'; exit 77; fi; exec '${llb_so_py}' '${CMAKE_CURRENT_LIST_DIR}/test_gbnf_walks.py' '$<TARGET_FILE:so_walk>' '${CMAKE_CURRENT_LIST_DIR}/data' '${LLB_DEFAULT_MODEL}'")
set_tests_properties(test_gbnf_walks PROPERTIES TIMEOUT 600 LABELS unit SKIP_RETURN_CODE 77)
