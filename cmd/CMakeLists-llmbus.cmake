# The `llmbus` binary: supervisor (serve, run) and client CLI (generate, chat, tokenize,
# generate --inproc). It needs the actor binaries beside it for serve/run.
add_library(llmbus_supervisor STATIC ${CMAKE_CURRENT_LIST_DIR}/supervisor.c
            ${CMAKE_CURRENT_LIST_DIR}/serve.c ${CMAKE_CURRENT_LIST_DIR}/serve_nats_config.c)
target_include_directories(llmbus_supervisor PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_supervisor PUBLIC llmbus_input_processor_core llmbus_bus llmbus_base)

add_executable(llmbus ${CMAKE_CURRENT_LIST_DIR}/llmbus.c ${CMAKE_CURRENT_LIST_DIR}/tokenize.c
               ${CMAKE_CURRENT_LIST_DIR}/generate_inproc.c ${CMAKE_CURRENT_LIST_DIR}/generate_structured.c
               ${CMAKE_CURRENT_LIST_DIR}/perplexity.c ${CMAKE_CURRENT_LIST_DIR}/perplexity_kld.c
               ${CMAKE_CURRENT_LIST_DIR}/status.c)
target_link_libraries(llmbus PRIVATE llmbus_cli_client llmbus_supervisor llmbus_sampler llmbus_structured_output
                      llmbus_model llmbus_bus llmbus_base PkgConfig::JANSSON)
