# The LLaMA forward pass (kernels engineer): appended to llmbus_model, which links the CPU
# kernels. model/CMakeLists.txt creates llmbus_model after including this file, so the
# link is deferred to the end of the directory (cmake_language DEFER, CMake >= 3.19).
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/forward.c)
  list(APPEND LLB_MODEL_SOURCES ${CMAKE_CURRENT_LIST_DIR}/forward.c ${CMAKE_CURRENT_LIST_DIR}/packed_cache.c)
  list(APPEND LLB_MODEL_LIBS llmbus_kernels_cpu)
  cmake_language(DEFER CALL target_link_libraries llmbus_model PUBLIC llmbus_kernels_cpu)
endif()
