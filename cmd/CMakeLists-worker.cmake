# The "worker" area of cmd/: the gpu_worker actor (its bus binding actors/gpu_worker/actor.c,
# built here as a library so tests can run it in-process) and its main, llmbus-gpu-worker.
add_library(llmbus_gpu_worker_actor STATIC ${CMAKE_SOURCE_DIR}/actors/gpu_worker/actor.c)
target_include_directories(llmbus_gpu_worker_actor PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_gpu_worker_actor PUBLIC llmbus_gpu_worker llmbus_bus llmbus_schemas
                      llmbus_model llmbus_base)

add_executable(llmbus-gpu-worker ${CMAKE_CURRENT_LIST_DIR}/gpu_worker_main.c)
target_link_libraries(llmbus-gpu-worker PRIVATE llmbus_gpu_worker_actor llmbus_actor_main llmbus_spec_config)
