# Jinja interpreter for the GGUF's chat template (issue 17): lexer, parser, values,
# operators, methods/globals, filters/tests, evaluator and the public API. A library of its
# own so that only its users link jansson (contexts come as JSON); included by
# model/CMakeLists.txt.
add_library(llmbus_jinja STATIC
            ${CMAKE_CURRENT_LIST_DIR}/jinja_lex.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_parse.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_value.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_ops.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_eval.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_filters.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_methods.c)
target_include_directories(llmbus_jinja PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_jinja PUBLIC llmbus_base PkgConfig::JANSSON m)
