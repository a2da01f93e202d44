# The functions that register tpx's tests with CTest, one per kind of test:
#
#   tpx_add_test(NAME n SOURCES files... LABELS labels... [LIBRARIES targets...] [UNSANITIZED])
#       a doctest executable n (sources + the shared doctest main), run as the CTest test n.
#       UNSANITIZED: only the builds of everything build and run it, not the sanitizer presets
#       (it stays out of the target tpx-tests and gets the label unsanitized, which they leave
#       out): the property tests' parts after the first, tests/CMakeLists.txt.
#   tpx_add_cuda_test(NAME n [EXECUTABLE e] [SOURCES files...] [LABELS labels...]
#                     [MIN_DEVICES k] [ARGS doctest-args...] [LIBRARIES targets...])
#       the CTest test n running the doctest executable e (default n) with ARGS (a doctest
#       filter, say); with SOURCES, e is built here from .cu files compiled by nvcc, linked to
#       tpx::cuda and the CUDA test main (tests/cuda/cuda_test_main.cpp), else an earlier call
#       built it.
#       Needs TPX_CUDA; adds the label cuda; joins the target tpx-cuda-all. With fewer than k
#       GPUs (default 1) it prints "skipped: no CUDA device" (or how many it needs) and CTest
#       counts it as skipped, never as passed.
#   tpx_add_static_test(NAME n SOURCE file)
#       a file whose compiling is the test: static_assert-only, or compiled with options that make
#       a warning an error (target_compile_options on n). It is built with everything else, so a
#       broken assertion breaks the build, and the CTest test n rebuilds it. Label static.
#   tpx_add_compile_fail_test(NAME n SOURCE file REGEX regex [DEFINES macros...]
#                             [LIBRARIES targets...])
#       a file that must not compile: the CTest test n compiles it and passes only if that fails
#       with a first error line matching regex (CMake regex syntax; no ';'). DEFINES picks one case
#       of a file holding several (#if defined(CASE_NAME)). Label compile-fail.
#   tpx_add_consumer_test(name [ARGS script-args...] [LABELS labels...])
#       the CTest test name: cmake/tpxConsumerCheck.cmake builds examples/consumer against tpx in
#       the folder name, as ARGS say (-DMODE=subdirectory or package, ...), with this build's
#       generator, compilers and build type. Labels unit, consumer and those given.
# Each links tpx::tpx (tpx::cuda for CUDA tests) and the LIBRARIES given: tpx::io where a test
# includes the checkpoints (tpx/io), as a user's project would.
#
# The compile checks run `cmake --build` on this build tree (cmake/tpxCompileCheck.cmake), one
# at a time (RESOURCE_LOCK), as two build tools must not share one build tree. Every run-time
# test but the UNSANITIZED joins the target tpx-tests, which the sanitizer presets build instead
# of everything.
# Our own test targets compile with -Wall -Wextra -Wpedantic, as errors under TPX_WERROR
# (tpx_target_warnings, cmake/tpxWarnings.cmake); tpx::tpx does not pass these on to consumers.
include_guard(GLOBAL)
include(tpxWarnings)

add_custom_target(tpx-tests)

function(tpx_add_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "UNSANITIZED" "NAME" "SOURCES;LABELS;LIBRARIES")
  add_executable(${arg_NAME} ${arg_SOURCES})
  target_link_libraries(${arg_NAME} PRIVATE tpx::tpx ${arg_LIBRARIES} tpx_doctest_main)
  tpx_target_warnings(${arg_NAME})
  add_test(NAME ${arg_NAME} COMMAND ${arg_NAME})
  set(labels ${arg_LABELS})
  if(arg_UNSANITIZED)
    list(APPEND labels unsanitized)
  else()
    add_dependencies(tpx-tests ${arg_NAME})
  endif()
  set_tests_properties(${arg_NAME} PROPERTIES LABELS "${labels}")
endfunction()

# The exit status with which the CUDA test main reports "skipped" (the automake convention).
set(TPX_SKIP_RETURN_CODE 77)

function(tpx_add_cuda_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;MIN_DEVICES;EXECUTABLE"
                        "SOURCES;LABELS;ARGS;LIBRARIES")
  if(NOT TPX_CUDA)
    message(FATAL_ERROR "tpx_add_cuda_test(${arg_NAME}): configure with TPX_CUDA=ON (needs nvcc)")
  endif()
  if(NOT arg_MIN_DEVICES)
    set(arg_MIN_DEVICES 1)
  endif()
  if(NOT arg_EXECUTABLE)
    set(arg_EXECUTABLE ${arg_NAME})
  endif()
  if(arg_SOURCES)
    add_executable(${arg_EXECUTABLE} ${arg_SOURCES})
    target_link_libraries(${arg_EXECUTABLE} PRIVATE tpx::cuda ${arg_LIBRARIES} tpx_cuda_test_main)
    tpx_target_warnings(${arg_EXECUTABLE})
    add_dependencies(tpx-tests ${arg_EXECUTABLE})
    add_dependencies(tpx-cuda-all ${arg_EXECUTABLE})
  endif()
  add_test(NAME ${arg_NAME} COMMAND ${arg_EXECUTABLE} --tpx-min-devices=${arg_MIN_DEVICES} ${arg_ARGS})
  set_tests_properties(${arg_NAME} PROPERTIES
    LABELS "cuda;${arg_LABELS}"
    SKIP_RETURN_CODE ${TPX_SKIP_RETURN_CODE})
endfunction()

# The CTest test `name` that builds the object target `name` and expects it to compile
# (expect = pass) or not (expect = fail).
function(_tpx_add_compile_check name expect)
  add_test(NAME ${name}
    COMMAND "${CMAKE_COMMAND}" -DBUILD_DIR=${CMAKE_BINARY_DIR} -DTARGET=${name}
            -DCONFIG=$<CONFIG> -DEXPECT=${expect}
            -P "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tpxCompileCheck.cmake")
  set_tests_properties(${name} PROPERTIES RESOURCE_LOCK tpx-build-tree)
endfunction()

function(tpx_add_static_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;SOURCE" "")
  add_library(${arg_NAME} OBJECT ${arg_SOURCE})
  target_link_libraries(${arg_NAME} PRIVATE tpx::tpx)
  tpx_target_warnings(${arg_NAME})
  _tpx_add_compile_check(${arg_NAME} pass)
  set_tests_properties(${arg_NAME} PROPERTIES LABELS static)
endfunction()

function(tpx_add_compile_fail_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;SOURCE;REGEX" "DEFINES;LIBRARIES")
  if(NOT arg_REGEX)
    message(FATAL_ERROR "tpx_add_compile_fail_test(${arg_NAME}): give the expected diagnostic as REGEX")
  endif()
  add_library(${arg_NAME} OBJECT EXCLUDE_FROM_ALL ${arg_SOURCE})
  target_link_libraries(${arg_NAME} PRIVATE tpx::tpx ${arg_LIBRARIES})
  target_compile_definitions(${arg_NAME} PRIVATE ${arg_DEFINES})
  _tpx_add_compile_check(${arg_NAME} fail)
  set_tests_properties(${arg_NAME} PROPERTIES
    LABELS compile-fail
    PASS_REGULAR_EXPRESSION "tpx-compile-check: first error: [^\n]*${arg_REGEX}"
    FAIL_REGULAR_EXPRESSION "tpx-compile-check: [^ ]+ compiled")
endfunction()

function(tpx_add_consumer_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "ARGS;LABELS")
  add_test(NAME ${name}
    COMMAND "${CMAKE_COMMAND}"
            -DTPX_SOURCE_DIR=${PROJECT_SOURCE_DIR} -DTPX_BINARY_DIR=${PROJECT_BINARY_DIR}
            -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/${name}
            -DGENERATOR=${CMAKE_GENERATOR} -DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}
            -DCXX_COMPILER=${CMAKE_CXX_COMPILER} -DCXX_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}
            -DBUILD_TYPE=${CMAKE_BUILD_TYPE} ${arg_ARGS}
            -P "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/tpxConsumerCheck.cmake")
  set(labels unit consumer ${arg_LABELS})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}")
endfunction()
