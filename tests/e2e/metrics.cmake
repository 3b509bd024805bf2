# Observability end to end: Debian's prometheus scrapes a live `llmbus serve` stack under load
# with ops/prometheus/prometheus.yml and PromQL checks the series and the Grafana dashboard's
# queries (tests/e2e/test_prometheus_scrape.py, standard library only). It prints the reason
# and exits 77 (skipped) when prometheus, a binary or the model is missing.
find_program(LLB_PYTHON3 python3)
add_test(NAME metrics_test_prometheus_scrape
         COMMAND ${LLB_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/test_prometheus_scrape.py)
set_tests_properties(metrics_test_prometheus_scrape PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "e2e;metrics" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
# One scrape for the whole stack: a vLLM-style job with the API port as its only target, and no
# per-actor metrics port, sees every engine actor's series (tests/e2e/test_metrics_one_scrape.py).
add_test(NAME metrics_test_one_scrape
         COMMAND ${LLB_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/test_metrics_one_scrape.py)
set_tests_properties(metrics_test_one_scrape PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "e2e;metrics" RUN_SERIAL TRUE
                     ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
