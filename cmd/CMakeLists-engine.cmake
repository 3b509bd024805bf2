# The "engine" area of cmd/: the shared actor main skeleton (flags, connect, heartbeat,
# run/drain) used by every llmbus-<actor> binary, and the scheduler and kv_manager mains.
add_library(llmbus_actor_main STATIC ${CMAKE_CURRENT_LIST_DIR}/actor_main.c)
target_include_directories(llmbus_actor_main PUBLIC ${CMAKE_SOURCE_DIR})
target_compile_definitions(llmbus_actor_main PRIVATE
                           LLB_DEFAULT_MODEL_PATH="${LLB_DEFAULT_MODEL}")
target_link_libraries(llmbus_actor_main PUBLIC llmbus_bus llmbus_schemas llmbus_base)

add_executable(llmbus-kv-manager ${CMAKE_CURRENT_LIST_DIR}/kv_manager_main.c)
target_link_libraries(llmbus-kv-manager PRIVATE llmbus_kv_manager_actor llmbus_actor_main)

# --speculative-config JSON (vLLM's spelling) for the scheduler and worker mains.
add_library(llmbus_spec_config STATIC ${CMAKE_CURRENT_LIST_DIR}/spec_config.c)
target_include_directories(llmbus_spec_config PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_spec_config PUBLIC llmbus_sampler llmbus_base PkgConfig::JANSSON)

add_executable(llmbus-scheduler ${CMAKE_CURRENT_LIST_DIR}/scheduler_main.c)
target_link_libraries(llmbus-scheduler PRIVATE llmbus_scheduler_actor llmbus_actor_main llmbus_model
                      llmbus_spec_config)
