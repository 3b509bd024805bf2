# llmbus-bench pure parts: percentiles, Poisson arrivals, chunked/SSE
# decoding, datasets (the tokenizer case uses the default model; skipped without it), /proc
# memory of a process tree.
if(TARGET llmbus_bench_core)
  llb_add_test(test_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bench.c
               LIBS llmbus_bench_core llmbus_model PkgConfig::CMOCKA m LABELS unit bench TIMEOUT 60
               ARGS ${LLB_DEFAULT_MODEL})
endif()

# llmbus-kernel-bench's option checks and --context (the decode case uses the default model;
# skipped without it).
if(TARGET llmbus_kernel_bench)
  llb_add_test(test_kernel_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernel_bench.c
               LIBS llmbus_kernel_bench PkgConfig::CMOCKA LABELS unit bench TIMEOUT 300
               ARGS ${LLB_DEFAULT_MODEL})
endif()
# ops/bench/plot.py on synthetic result files (tests/unit/test_bench_plot.py); needs the venv's
# matplotlib (make venv), else skipped.
set(llb_plot_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
add_test(NAME test_bench_plot_draws_throughput_and_latency
         COMMAND /bin/sh -c "if [ ! -x '${llb_plot_py}' ]; then echo 'SKIP: no venv (make venv)'; exit 77; fi; exec '${llb_plot_py}' '${CMAKE_CURRENT_LIST_DIR}/test_bench_plot.py'")
set_tests_properties(test_bench_plot_draws_throughput_and_latency PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                     LABELS unit)
