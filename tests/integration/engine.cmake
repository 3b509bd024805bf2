# Engine actors (kv_manager, scheduler) as processes against a real nats-server.
llb_add_test(test_engine_kv SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_kv.c
             LIBS llmbus_bus llmbus_schemas llmbus_nats_test_server PkgConfig::CMOCKA
                  Threads::Threads
             LABELS integration engine TIMEOUT 180)
add_dependencies(test_engine_kv llmbus-kv-manager)
llb_add_test(test_engine_scheduler SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_scheduler.c
             LIBS llmbus_bus llmbus_schemas llmbus_nats_test_server PkgConfig::CMOCKA
                  Threads::Threads
             LABELS integration engine TIMEOUT 180)
add_dependencies(test_engine_scheduler llmbus-scheduler llmbus-kv-manager)
# The kv_manager and encoder_cache actors in process: create / start / stop / stats
# (actors/README.md "One shape for every actor").
llb_add_test(test_actor_lifecycle SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_actor_lifecycle.c
             LIBS llmbus_kv_manager_actor llmbus_encoder_cache_actor llmbus_nats_test_server
                  PkgConfig::CMOCKA Threads::Threads
             LABELS integration engine TIMEOUT 180)
# The scheduler's failure detection (peer_health) on a real bus: a worker replaced before its
# next beat, seen from the beat the KV geometry came from.
llb_add_test(test_scheduler_peer_health SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_peer_health.c
             LIBS llmbus_scheduler_actor llmbus_nats_test_server PkgConfig::CMOCKA Threads::Threads
             LABELS integration engine TIMEOUT 120)
# The scheduler's durable intake on a real JetStream: a consumer that stops delivering is found
# and subscribed again; idle and full consumers are not taken for stalled.
llb_add_test(test_durable_intake SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_durable_intake.c
             LIBS llmbus_scheduler_actor llmbus_nats_test_server PkgConfig::CMOCKA Threads::Threads
             LABELS integration engine TIMEOUT 120)
# A resumed request (a resend taken over from the request it replaces, or resumed from the
# output processor's history after a scheduler restart) that finishes in its first step: its
# client gets the whole completion from position 0. Scheduler, kv_manager and output processor
# in process, the test as the worker and the clients.
llb_add_test(test_scheduler_takeover SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_takeover.c
             LIBS llmbus_scheduler_actor llmbus_kv_manager_actor llmbus_output_processor_actor
                  llmbus_nats_test_server PkgConfig::CMOCKA Threads::Threads
             LABELS integration engine TIMEOUT 180)
