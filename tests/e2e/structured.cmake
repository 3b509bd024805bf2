# Structured output on the default model through `llmbus generate --inproc --json-schema`:
# 50 seeded samples at temperature 1 all parse and validate with Python jsonschema
# (test_generate_structured_output.py; the venv of `make venv`). Skips without the model.
set(llb_so_e2e_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
add_test(NAME test_generate_structured_output_validates
         COMMAND sh -c "if [ ! -x '${llb_so_e2e_py}' ]; then echo 'SKIP: ${llb_so_e2e_py} missing (make venv)'; exit 77; fi; exec '${llb_so_e2e_py}' '${CMAKE_CURRENT_LIST_DIR}/test_generate_structured_output.py' '$<TARGET_FILE:llmbus>' '${LLB_DEFAULT_MODEL}'")
set_tests_properties(test_generate_structured_output_validates PROPERTIES TIMEOUT 900 LABELS e2e SKIP_RETURN_CODE 77)
