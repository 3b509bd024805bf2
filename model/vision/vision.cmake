# The vision side (issue 22): image decoding (llmbus_image) and the image encoder
# (llmbus_clip); included by model/CMakeLists.txt.

# llmbus_image: JPEG / PNG decoding and the vision encoder's preprocessing (model/vision/image.h),
# apart from llmbus_model so that only what takes images links libjpeg and libpng.
pkg_check_modules(LIBPNG REQUIRED IMPORTED_TARGET libpng)
pkg_check_modules(LIBJPEG REQUIRED IMPORTED_TARGET libjpeg)
add_library(llmbus_image STATIC ${CMAKE_CURRENT_LIST_DIR}/image.c)
target_include_directories(llmbus_image PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_image PUBLIC llmbus_base PkgConfig::LIBPNG PkgConfig::LIBJPEG m)

# llmbus_clip: the image encoder (model/vision/clip.h): mmproj loading, preprocessing, the ViT and its
# projector on the CPU backend's op table.
add_library(llmbus_clip STATIC
  ${CMAKE_CURRENT_LIST_DIR}/clip.c
  ${CMAKE_CURRENT_LIST_DIR}/clip_preproc.c
  ${CMAKE_CURRENT_LIST_DIR}/vit.c)
target_include_directories(llmbus_clip PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(llmbus_clip PUBLIC llmbus_model llmbus_image llmbus_kernels_cpu llmbus_base m)
