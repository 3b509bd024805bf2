# llmbus-gpu-worker --device: --device cuda without a usable device
# (or in a build without CUDA) ends with exit 1 and one log line naming the error; bad
# --device / --gpu-memory-utilization values are usage errors (exit 2); a --device cpu worker
# of a CUDA build starts and drains on a machine without a GPU. Runs the real binary against
# an embedded nats-server; exits 77 (skipped) when a CUDA device is present (then cuda starts)
# or no nats-server is installed.
llb_add_test(test_worker_device
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_worker_device.c
             LIBS llmbus_nats_test_server llmbus_base PkgConfig::CMOCKA
             ARGS $<TARGET_FILE:llmbus-gpu-worker>
             LABELS "integration;worker" TIMEOUT 120)
add_dependencies(test_worker_device llmbus-gpu-worker)
target_compile_definitions(test_worker_device PRIVATE LLB_DEFAULT_MODEL="${LLB_DEFAULT_MODEL}")
if(LLB_HAVE_CUDA)
  target_compile_definitions(test_worker_device PRIVATE LLB_HAVE_CUDA=1)
  target_link_libraries(test_worker_device PRIVATE llmbus_kernels_cuda)
endif()
