# Jinja interpreter (model/template/jinja.h): unit tests of the language, errors, bounds and hostile
# templates (test_jinja.c), and the differential test against Python jinja2 on real chat
# templates (test_jinja_templates.py with the jinja_render tool; the venv of `make venv`
# provides jinja2; the templates come from ops/fetch-chat-templates.sh).
llb_add_test(test_jinja SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_jinja.c
             LIBS llmbus_template PkgConfig::CMOCKA LABELS unit TIMEOUT 120)
add_executable(jinja_render ${CMAKE_CURRENT_LIST_DIR}/jinja_render.c)
target_link_libraries(jinja_render PRIVATE llmbus_template)
target_include_directories(jinja_render PRIVATE ${CMAKE_SOURCE_DIR})
set(llb_jinja_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
add_test(NAME test_jinja_templates
         COMMAND sh -c "if [ ! -x '${llb_jinja_py}' ]; then echo 'SKIP: ${llb_jinja_py} missing (make venv)'; exit 77; fi; exec '${llb_jinja_py}' '${CMAKE_CURRENT_LIST_DIR}/test_jinja_templates.py' '$<TARGET_FILE:jinja_render>' '${CMAKE_SOURCE_DIR}/.cache/chat-templates' '${LLB_DEFAULT_MODEL}'")
set_tests_properties(test_jinja_templates PROPERTIES TIMEOUT 600 LABELS unit SKIP_RETURN_CODE 77)
