# The include rules of docs/design.md §1 over the whole checkout (check_layout.py: which folder
# may include which, nats.h / FlatBuffers / CUDA headers in their own folder, no include
# cycles, no call cycles between source files, no FNV constant outside base/, every source
# compiled by the CMakeLists.txt of its own folder, known violations in its commented
# allowlists), and the checker's own test on fake trees, so that a broken
# checker cannot pass silently. Python 3, standard library only.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME test_layout_includes
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/check_layout.py ${CMAKE_SOURCE_DIR})
  add_test(NAME test_layout_checker_catches_violations
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_check_layout.py)
  set_tests_properties(test_layout_includes test_layout_checker_catches_violations
                       PROPERTIES TIMEOUT 60 LABELS unit)
endif()
