# Images for the vision encoder (model/image.h): image_tool decodes / resizes a file, and
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
