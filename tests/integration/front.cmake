# Front actors over a real nats-server (each test starts its own, see nats_test_server.h):
# the input processor (GenerateRequest → EngineCoreRequest, errors, n > 1 seeds, aborts),
# the output processor (EngineCoreOutputs → RequestOutputs, garbage, stop-string aborts) and
# the CLI client (streaming, errors, timeout). Tokenizer: the GPT-2 vocab test vector.
llb_add_test(test_input_processor_actor
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_input_processor_actor.c
             LIBS llmbus_input_processor_actor llmbus_nats_test_server PkgConfig::CMOCKA
             LABELS integration front TIMEOUT 180)
llb_add_test(test_output_processor_actor
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_output_processor_actor.c
             LIBS llmbus_output_processor_actor llmbus_nats_test_server PkgConfig::CMOCKA
             LABELS integration front TIMEOUT 180)
llb_add_test(test_cli_client
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli_client.c
             LIBS llmbus_cli_client llmbus_input_processor_actor llmbus_output_processor_actor
                  llmbus_nats_test_server PkgConfig::CMOCKA PkgConfig::JANSSON
             LABELS integration front TIMEOUT 180)
