# Several hosts on one machine (network namespaces): a 3-node NATS cluster from
# ops/cluster/nats-node.conf and one engine per node; one node and one engine killed mid-load.
# Needs root for `ip netns` (skips with the reason otherwise). Only the Python standard library.
add_test(NAME test_cluster_netns
         COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/test_cluster_netns.py)
set_tests_properties(test_cluster_netns PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "e2e;cluster"
                     RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
