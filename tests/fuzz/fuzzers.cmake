# libFuzzer targets (tests/fuzz/README.md). Only with -DLLB_FUZZ=ON (clang); `make fuzz` builds
# them in build-fuzz/ and runs each from its corpus in tests/fuzz/corpus/<name>/.
# llb_add_fuzzer(NAME SOURCES ... LIBS ...): one libFuzzer executable; all targets are built
# by the custom target `fuzzers`.
if(LLB_FUZZ AND NOT TARGET fuzzers)
  add_custom_target(fuzzers)
endif()

function(llb_add_fuzzer name)
  if(NOT LLB_FUZZ)
    return()
  endif()
  cmake_parse_arguments(F "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${F_SOURCES})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE LLB_TESTDATA_DIR="${LLB_TESTDATA_DIR}")
  target_link_libraries(${name} PRIVATE ${F_LIBS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  add_dependencies(fuzzers ${name})
endfunction()

llb_add_fuzzer(fuzz_tokenizer SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_tokenizer.c
               ${CMAKE_SOURCE_DIR}/tests/unit/arch_models.c LIBS llmbus_model llmbus_test_gguf_writer)
llb_add_fuzzer(fuzz_api_request SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_api_request.c
               LIBS llmbus_api_server_core llmbus_schemas)
llb_add_fuzzer(fuzz_tool_parser SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_tool_parser.c LIBS llmbus_api_server_core)
llb_add_fuzzer(fuzz_image SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_image.c LIBS llmbus_image)
llb_add_fuzzer(fuzz_gbnf SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_gbnf.c ${CMAKE_CURRENT_LIST_DIR}/so_fuzz_walk.c
               LIBS llmbus_structured_output)
llb_add_fuzzer(fuzz_json_schema SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_json_schema.c ${CMAKE_CURRENT_LIST_DIR}/so_fuzz_walk.c
               LIBS llmbus_structured_output)
# Issue 38: every decoder of a tenant's input, and of the operator's files.
# (the JSON Schema kind, 0, is fuzz_json_schema above, whose walk also checks every mask bit)
set(llb_so_kinds json_schema choice regex)
foreach(kind choice regex)
  list(FIND llb_so_kinds ${kind} idx)
  llb_add_fuzzer(fuzz_so_${kind} SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_structured.c LIBS llmbus_structured_output)
  if(TARGET fuzz_so_${kind})
    target_compile_definitions(fuzz_so_${kind} PRIVATE FUZZ_SO_KIND=${idx})
  endif()
endforeach()
llb_add_fuzzer(fuzz_chat_render SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_chat_render.c
               LIBS llmbus_input_processor_core)
llb_add_fuzzer(fuzz_inproc_process SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_inproc_process.c
               LIBS llmbus_input_processor_actor)
llb_add_fuzzer(fuzz_traceparent SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_traceparent.c LIBS llmbus_bus)
llb_add_fuzzer(fuzz_request_ids SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_request_ids.c
               LIBS llmbus_input_processor_core)
llb_add_fuzzer(fuzz_mmproj SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_mmproj.c LIBS llmbus_clip)
llb_add_fuzzer(fuzz_stop_strings SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_stop_strings.c
               LIBS llmbus_output_processor_core)
foreach(kind tenants_file api_keys_file)
  llb_add_fuzzer(fuzz_${kind} SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_config_files.c
                 LIBS llmbus_input_processor_core llmbus_api_server_core)
  if(TARGET fuzz_${kind})
    target_compile_definitions(fuzz_${kind} PRIVATE FUZZ_FILE_KIND=$<IF:$<STREQUAL:${kind},tenants_file>,0,1>)
  endif()
endforeach()
