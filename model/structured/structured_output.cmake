# Structured output (issue 17): JSON Schema / json_object / choice grammars, the byte-level
# matcher and the vocabulary mask. A library of its own so that only its users link jansson
# (the schema parser); included by model/CMakeLists.txt.
add_library(llmbus_structured_output STATIC
            ${CMAKE_CURRENT_LIST_DIR}/so_schema.c
            ${CMAKE_CURRENT_LIST_DIR}/so_schema_merge.c
            ${CMAKE_CURRENT_LIST_DIR}/so_number.c
            ${CMAKE_CURRENT_LIST_DIR}/so_format.c
            ${CMAKE_CURRENT_LIST_DIR}/so_dfa.c
            ${CMAKE_CURRENT_LIST_DIR}/so_matcher.c
            ${CMAKE_CURRENT_LIST_DIR}/so_regex.c
            ${CMAKE_CURRENT_LIST_DIR}/so_gbnf.c
            ${CMAKE_CURRENT_LIST_DIR}/so_gbnf_check.c
            ${CMAKE_CURRENT_LIST_DIR}/so_vocab.c)
target_include_directories(llmbus_structured_output PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_structured_output PUBLIC llmbus_model llmbus_base PkgConfig::JANSSON)
