# Images for the vision encoder (model/vision/image.h): image_tool decodes / resizes a file, and
# test_image.py checks it against Pillow (the venv of `make venv`): PNG decoding exact, JPEG
# within libjpeg versions' IDCT differences, Pillow's BILINEAR resize exact, and every bad
# file (empty, wrong type, truncated, a header claiming 100k x 100k, CMYK) refused with the
# right status before any pixel is decoded.
add_executable(image_tool ${CMAKE_CURRENT_LIST_DIR}/image_tool.c)
target_link_libraries(image_tool PRIVATE llmbus_image)
target_include_directories(image_tool PRIVATE ${CMAKE_SOURCE_DIR})
set(llb_image_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
add_test(NAME test_image
         COMMAND sh -c "if [ ! -x '${llb_image_py}' ]; then echo 'SKIP: ${llb_image_py} missing (make venv)'; exit 77; fi; exec '${llb_image_py}' '${CMAKE_CURRENT_LIST_DIR}/test_image.py' '$<TARGET_FILE:image_tool>'")
set_tests_properties(test_image PROPERTIES TIMEOUT 300 LABELS unit SKIP_RETURN_CODE 77)

# A progressive JPEG of more scans than LLB_IMAGE_MAX_JPEG_SCANS is refused (CPU bound).
llb_add_test(test_image_scans SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_image_scans.c
             LIBS llmbus_image PkgConfig::CMOCKA LABELS unit TIMEOUT 60)

# The image encoder (model/vision/clip.h): clip_tool plans and encodes with a random-weight mmproj that
# tests/tools/make_mmproj.py writes at test time; test_clip.py compares it with a float64 numpy
# reference (tests/unit/clip_reference.py) and with the embeddings llama.cpp computed for the
# same seeded mmproj (tests/unit/data/clip/, recorded by tests/tools/record_clip_llamacpp.sh).
add_executable(clip_tool ${CMAKE_CURRENT_LIST_DIR}/clip_tool.c)
target_link_libraries(clip_tool PRIVATE llmbus_clip)
target_include_directories(clip_tool PRIVATE ${CMAKE_SOURCE_DIR})
add_test(NAME test_clip
         COMMAND sh -c "if [ ! -x '${llb_image_py}' ]; then echo 'SKIP: ${llb_image_py} missing (make venv)'; exit 77; fi; exec '${llb_image_py}' '${CMAKE_CURRENT_LIST_DIR}/test_clip.py' '$<TARGET_FILE:clip_tool>'")
set_tests_properties(test_clip PROPERTIES TIMEOUT 900 LABELS unit SKIP_RETURN_CODE 77)
