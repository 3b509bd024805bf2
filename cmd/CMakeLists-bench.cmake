# The "bench" area of cmd/: llmbus-bench (serve: an OpenAI-compatible endpoint under load, after
# vLLM's `bench serve`; engine: decode step in-process vs through the bus). Its pure parts
# (statistics, arrivals, SSE/chunked decoding, datasets, /proc memory) are the library
# llmbus_bench_core, unit-tested in tests/unit/bench.cmake.
add_library(llmbus_bench_core STATIC ${CMAKE_CURRENT_LIST_DIR}/bench_core.c
            ${CMAKE_CURRENT_LIST_DIR}/bench_dataset.c ${CMAKE_CURRENT_LIST_DIR}/bench_proc.c
            ${CMAKE_CURRENT_LIST_DIR}/bench_http.c ${CMAKE_CURRENT_LIST_DIR}/bench_flags.c)
target_include_directories(llmbus_bench_core PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_bench_core PUBLIC llmbus_model llmbus_base PkgConfig::JANSSON m)

add_executable(llmbus-bench ${CMAKE_CURRENT_LIST_DIR}/bench.c ${CMAKE_CURRENT_LIST_DIR}/bench_serve.c
               ${CMAKE_CURRENT_LIST_DIR}/bench_engine.c)
target_link_libraries(llmbus-bench PRIVATE llmbus_bench_core llmbus_sampler llmbus_model llmbus_bus
                      llmbus_schemas llmbus_base PkgConfig::JANSSON Threads::Threads m)

# llmbus-kernel-bench: prefill / decode tok/s of the CPU forward on a real model, and with
# --roofline each rate as a fraction of the machine's bound (kernels/cpu/bench/roofline.h).
add_executable(llmbus-kernel-bench ${CMAKE_CURRENT_LIST_DIR}/kernel_bench.c)
target_link_libraries(llmbus-kernel-bench PRIVATE llmbus_model llmbus_kernels_cpu llmbus_kernels_roofline llmbus_base)
target_compile_definitions(llmbus-kernel-bench PRIVATE LLB_DEFAULT_MODEL="${LLB_DEFAULT_MODEL}")

# llmbus-clip-bench: images/s of the image encoder (model/clip.h) per image size.
add_executable(llmbus-clip-bench ${CMAKE_CURRENT_LIST_DIR}/clip_bench.c)
target_link_libraries(llmbus-clip-bench PRIVATE llmbus_clip llmbus_base)
