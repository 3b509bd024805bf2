# The "multimodal" area of cmd/: llmbus-encoder-cache (actors/encoder_cache on
# <prefix>.engine.<eid>.encoder). `llmbus serve` spawns it beside the other actors.
add_executable(llmbus-encoder-cache ${CMAKE_CURRENT_LIST_DIR}/encoder_cache_main.c)
target_link_libraries(llmbus-encoder-cache PRIVATE llmbus_encoder_cache_actor llmbus_actor_main)
