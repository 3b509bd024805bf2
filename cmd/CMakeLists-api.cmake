# The "api" area of cmd/: llmbus-api-server, the OpenAI-compatible HTTP front door.
if(TARGET llmbus_api_server)  # llmbus_actor_main comes from CMakeLists-engine.cmake
  add_executable(llmbus-api-server ${CMAKE_CURRENT_LIST_DIR}/api_server_main.c)
  target_link_libraries(llmbus-api-server PRIVATE llmbus_api_server llmbus_actor_main)
endif()
