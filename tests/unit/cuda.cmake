# CUDA backend tests. No cmocka (tests/unit/test_cuda_harness.h), so that the
# standalone project kernels/cuda/standalone builds them on GPU machines without our other
# dependencies. Without a device each prints "no CUDA device: <reason>" and exits 77 (skipped);
# test_cuda_status runs everywhere (it checks the no-device error path).
if(LLB_HAVE_CUDA AND TARGET llmbus_kernels_cuda)
  get_filename_component(llb_cuda_root ${CMAKE_CURRENT_LIST_DIR}/../.. ABSOLUTE)
  set(llb_cuda_tests
      test_cuda_status:60 test_cuda_ops:300 test_cuda_attention:300 test_cuda_sample:300 test_cuda_forward:900)
  foreach(entry IN LISTS llb_cuda_tests)
    string(REPLACE ":" ";" parts ${entry})
    list(GET parts 0 t)
    list(GET parts 1 secs)
    set(srcs ${CMAKE_CURRENT_LIST_DIR}/${t}.c)
    if(t STREQUAL "test_cuda_forward")
      list(APPEND srcs ${CMAKE_CURRENT_LIST_DIR}/random_llama.c ${CMAKE_CURRENT_LIST_DIR}/gguf_writer.c)
    endif()
    llb_add_test(${t} SOURCES ${srcs}
                 LIBS llmbus_kernels_cuda llmbus_model llmbus_kernels_cpu llmbus_sampling m
                 LABELS "unit;cuda" TIMEOUT ${secs})
    # ASan's shadow gap collides with the CUDA driver's mappings; cudart's allocations live
    # until exit (not leaks of ours).
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0")
    # the real-model case of test_cuda_forward reads the default model when it is there
    if(DEFINED LLB_DEFAULT_MODEL)
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
    endif()
  endforeach()
  # The benchmark (tests/tools/cuda_bench.c; ops/bench/cuda-bench.sh and ops/gpu/gpu-check.sh run
  # it): llama_forward over backend_cuda_ops() on random-weight models, tokens/s against floors.
  add_executable(llmbus_cuda_bench ${llb_cuda_root}/tests/tools/cuda_bench.c ${CMAKE_CURRENT_LIST_DIR}/random_llama.c
                 ${CMAKE_CURRENT_LIST_DIR}/gguf_writer.c)
  target_include_directories(llmbus_cuda_bench PRIVATE ${llb_cuda_root})
  target_link_libraries(llmbus_cuda_bench PRIVATE llmbus_kernels_cuda llmbus_model m)
endif()
