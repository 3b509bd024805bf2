# The documentation: every reference in every *.md resolves (check_links.py: files, #anchors,
# repository paths, quoted sections, design.md §N, nothing outside the checkout), the checker's
# own test on fake trees, and the architecture picture is the rendering of its .dot source
# (skipped without graphviz). Python 3, standard library only.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME test_docs_links_resolve
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_links.py ${CMAKE_SOURCE_DIR})
  add_test(NAME test_docs_link_checker_catches_broken_references
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_check_links.py)
  set_tests_properties(test_docs_links_resolve test_docs_link_checker_catches_broken_references
                       PROPERTIES TIMEOUT 60 LABELS unit)
endif()
add_test(NAME test_docs_architecture_svg_is_current
         COMMAND /bin/sh ${CMAKE_CURRENT_LIST_DIR}/check_architecture_svg.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(test_docs_architecture_svg_is_current PROPERTIES TIMEOUT 60 LABELS unit
                     SKIP_RETURN_CODE 77)
