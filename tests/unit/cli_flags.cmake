# cmd/flags: the one flag parser of every llmbus program (forms, positionals, --, lists,
# switch pairs, usage errors, --config YAML).
llb_add_test(test_flags SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_flags.c
             LIBS llmbus_flags PkgConfig::CMOCKA LABELS unit)
