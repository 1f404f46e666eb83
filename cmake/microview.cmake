# Helpers so that a leaf CMakeLists.txt is little more than a source list.
include(${CMAKE_CURRENT_LIST_DIR}/sides.cmake)
# Sides of pkg/ link only what cmake/sides.cmake allows (docs/architecture.md): checked once every
# directory has been read, so targets added anywhere (even after this line) are covered.
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL mv_check_sides)

# mv_library(<name> SOURCES <files...> [DEPS <targets...>] [PUBLIC_DEPS <targets...>])
# A static library whose header lives next to its sources; its side is taken from
# pkg/<side>/<module> (cmake/sides.cmake).
function(mv_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  mv_side(${name})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  if(A_DEPS)
    target_link_libraries(${name} PRIVATE ${A_DEPS})
  endif()
  if(A_PUBLIC_DEPS)
    target_link_libraries(${name} PUBLIC ${A_PUBLIC_DEPS})
  endif()
endfunction()

# mv_binary(<name> [SIDE <side>] SOURCES <files...> DEPS <targets...>)
# Without SIDE, microview-<side> names its side; other binaries are not checked.
function(mv_binary name)
  cmake_parse_arguments(A "" "SIDE" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  if(NOT A_SIDE AND name MATCHES "^microview-([a-z]+)$" AND DEFINED MV_SIDE_ALLOWS_${CMAKE_MATCH_1})
    set(A_SIDE ${CMAKE_MATCH_1})
  endif()
  if(A_SIDE)
    mv_side(${name} ${A_SIDE})
  endif()
  target_link_libraries(${name} PRIVATE ${A_DEPS} Threads::Threads)
  install(TARGETS ${name} RUNTIME DESTINATION bin)
endfunction()

# mv_unit_test(<name> SOURCES <files...> DEPS <targets...> [TIMEOUT s] [LABELS l...])
# A CUnit executable registered with ctest.
function(mv_unit_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit)
  target_link_libraries(${name} PRIVATE ${A_DEPS} mv_testlib cunit Threads::Threads)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${A_TIMEOUT} SKIP_RETURN_CODE 77
                                          LABELS "unit;${A_LABELS}")
  # Under an emulator (cross builds), a test that executes itself again must go through it:
  # the kernel cannot run the test's own binary directly.
  if(CMAKE_CROSSCOMPILING_EMULATOR)
    set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT
                 "MV_TEST_EMULATOR=${CMAKE_CROSSCOMPILING_EMULATOR}")
  endif()
endfunction()

# mv_script_test(<name> TIMEOUT <s> LABELS <labels...> [LOCK <resource>] [ENV <K=V>...]
#                [WORKDIR <dir>] COMMAND <script> [<args>...])
# Every script test (shell or Python) is registered through this one helper: a path relative to
# the source root is made absolute, a .py script runs under /usr/bin/python3, exit status 77
# means SKIPPED (the script prints why; scripts/test.sh counts it as skipped, never passed), and
# a timeout is always given. LOCK serialises tests that share a resource (a VM kit, a cluster).
function(mv_script_test name)
  cmake_parse_arguments(A "" "TIMEOUT;LOCK;WORKDIR" "LABELS;ENV;COMMAND" ${ARGN})
  if(NOT A_TIMEOUT OR NOT A_LABELS OR NOT A_COMMAND)
    message(FATAL_ERROR "mv_script_test(${name}): TIMEOUT, LABELS and COMMAND are required")
  endif()
  list(POP_FRONT A_COMMAND script)
  if(NOT IS_ABSOLUTE "${script}")
    set(script ${PROJECT_SOURCE_DIR}/${script})
  endif()
  if(NOT EXISTS "${script}")
    message(FATAL_ERROR "mv_script_test(${name}): no script ${script}")
  endif()
  if(script MATCHES "\\.py$")
    set(cmd /usr/bin/python3 ${script})
  else()
    set(cmd ${script})
  endif()
  if(A_WORKDIR)
    add_test(NAME ${name} COMMAND ${cmd} ${A_COMMAND} WORKING_DIRECTORY ${A_WORKDIR})
  else()
    add_test(NAME ${name} COMMAND ${cmd} ${A_COMMAND})
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${A_TIMEOUT} SKIP_RETURN_CODE 77
                                          LABELS "${A_LABELS}")
  if(A_LOCK)
    set_tests_properties(${name} PROPERTIES RESOURCE_LOCK ${A_LOCK})
  endif()
  if(A_ENV)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${A_ENV}")
  endif()
endfunction()

# mv_fuzz_driver(<name> SOURCES <driver.c and the code under test...> [INCLUDES <dirs...>]
#                [DEPS <targets...>])
# Every build: fuzz_replay_<name> runs the driver once on each file of tests/fuzz/corpus/<name>/
# (ctest fuzz_corpus_<name>). With MV_FUZZ (clang): also the libFuzzer binary fuzz_<name>, the code
# under test compiled into it so that it is instrumented (scripts/fuzz.sh runs it).
function(mv_fuzz_driver name)
  cmake_parse_arguments(A "" "" "SOURCES;INCLUDES;DEPS" ${ARGN})
  set(targets fuzz_replay_${name})
  add_executable(fuzz_replay_${name} ${A_SOURCES} ${PROJECT_SOURCE_DIR}/tests/fuzz/replay_main.c)
  set_target_properties(fuzz_replay_${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                                       ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME fuzz_corpus_${name}
           COMMAND fuzz_replay_${name} ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name})
  set_tests_properties(fuzz_corpus_${name} PROPERTIES TIMEOUT 120 LABELS "unit;fuzz")
  if(MV_FUZZ)
    add_executable(fuzz_${name} ${A_SOURCES})
    target_compile_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    list(APPEND targets fuzz_${name})
  endif()
  foreach(t IN LISTS targets)
    target_include_directories(${t} PRIVATE ${A_INCLUDES})
    target_link_libraries(${t} PRIVATE ${A_DEPS})
  endforeach()
endfunction()
