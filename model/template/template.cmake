# llmbus_template: chat templates (model/template/README.md) — the Jinja interpreter (lexer,
# parser, values, operators, methods/globals, filters/tests, evaluator and its public API), the
# one chat renderer over it (chat_render.c: a request's messages, tools and kwargs as the
# template's context) and the built-in templates as Jinja sources with the recognition of a
# model's template family (chat_template.c). A library of its own so that only its users link
# jansson (contexts come as JSON); included by model/CMakeLists.txt.
add_library(llmbus_template STATIC
            ${CMAKE_CURRENT_LIST_DIR}/jinja_lex.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_parse.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_value.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_ops.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_eval.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_filters.c
            ${CMAKE_CURRENT_LIST_DIR}/jinja_methods.c
            ${CMAKE_CURRENT_LIST_DIR}/chat_render.c
            ${CMAKE_CURRENT_LIST_DIR}/chat_template.c)
target_include_directories(llmbus_template PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_template PUBLIC llmbus_model llmbus_base PkgConfig::JANSSON Threads::Threads m)
