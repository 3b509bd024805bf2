# The "front" area of cmd/: the input and output processor actors (their bus bindings live in
# actors/<actor>/actor.c, built here as libraries so tests can run them in-process) and the
# client commands generate / chat / run, as the library llmbus_cli_client that the `llmbus`
# binary links (it also needs cmd/serve.c + cmd/supervisor.c for `run`).

add_library(llmbus_input_processor_actor STATIC ${CMAKE_SOURCE_DIR}/actors/input_processor/actor.c
            ${CMAKE_SOURCE_DIR}/actors/input_processor/actor_setup.c
            ${CMAKE_SOURCE_DIR}/actors/input_processor/engine_router.c)
target_include_directories(llmbus_input_processor_actor PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_input_processor_actor PUBLIC llmbus_input_processor_core llmbus_bus
                      llmbus_schemas llmbus_model llmbus_clip llmbus_base)

add_library(llmbus_output_processor_actor STATIC ${CMAKE_SOURCE_DIR}/actors/output_processor/actor.c)
target_include_directories(llmbus_output_processor_actor PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_output_processor_actor PUBLIC llmbus_output_processor_core llmbus_bus
                      llmbus_schemas llmbus_model llmbus_clip llmbus_base)

add_executable(llmbus-input-processor ${CMAKE_CURRENT_LIST_DIR}/input_processor_main.c)
target_link_libraries(llmbus-input-processor PRIVATE llmbus_input_processor_actor llmbus_actor_main)

add_executable(llmbus-output-processor ${CMAKE_CURRENT_LIST_DIR}/output_processor_main.c)
target_link_libraries(llmbus-output-processor PRIVATE llmbus_output_processor_actor llmbus_actor_main)

# generate.c (cmd_generate, cmd_chat), run.c (cmd_run), client.c (shared NATS client).
# cmd_run calls serve_actor_specs + supervisor_* from cmd/serve.c + cmd/supervisor.c, which
# the llmbus target compiles.
add_library(llmbus_cli_client STATIC ${CMAKE_CURRENT_LIST_DIR}/client.c
            ${CMAKE_CURRENT_LIST_DIR}/generate.c ${CMAKE_CURRENT_LIST_DIR}/run.c
            ${CMAKE_CURRENT_LIST_DIR}/line_edit.c)
target_include_directories(llmbus_cli_client PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_cli_client PUBLIC llmbus_bus llmbus_schemas llmbus_model llmbus_base
                      PkgConfig::JANSSON PkgConfig::LIBEDIT)
