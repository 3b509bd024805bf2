# Images over HTTP (issue 22): `llmbus serve --mmproj` with the default model
# given SmolVLM's image tokens and a seeded random mmproj, driven by the official openai client
# (tests/e2e/test_openai_images.py). Needs the venv (openai, gguf, numpy, pillow) and the image
# encoder's clip_tool (tests/unit/image.cmake); skips (77) without them.
if(TARGET clip_tool)
  set(llb_img_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
  add_test(NAME api_test_openai_images
           COMMAND sh -c "if [ ! -x '${llb_img_py}' ]; then echo 'SKIP: ${llb_img_py} missing (make venv)'; exit 77; fi; exec '${llb_img_py}' '${CMAKE_CURRENT_LIST_DIR}/test_openai_images.py' '$<TARGET_FILE:clip_tool>'")
  set_tests_properties(api_test_openai_images PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "e2e;api;multimodal"
                       RUN_SERIAL TRUE
                       ENVIRONMENT "LLMBUS_SOURCE_DIR=${CMAKE_SOURCE_DIR};LLMBUS_BUILD_DIR=${CMAKE_BINARY_DIR};LLMBUS_MODEL=${LLB_DEFAULT_MODEL}")
endif()
