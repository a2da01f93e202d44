# Run by CTest (cmake -P) for the static and compile-fail tests of cmake/tpxTesting.cmake: builds
# the object target TARGET of the build tree BUILD_DIR and says whether it compiled, echoing the
# compiler's output so CTest can match the expected diagnostic in it.
#
# EXPECT=pass: the exit status is the verdict. EXPECT=fail: CTest judges by the output: the
# compiler's first error line is echoed as "tpx-compile-check: first error: ...", which the
# test's PASS_REGULAR_EXPRESSION (the expected diagnostic) must match; if the file compiled, the line
# "tpx-compile-check: <target> compiled ..." printed below matches the test's
# FAIL_REGULAR_EXPRESSION, which overrides any match of the expected diagnostic.
set(config_args)
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}" ${config_args}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
message("${output}")

# tpx promises that the first error line is the sentence naming the dims and axes, so the
# compile-fail tests match their expected text against that line alone.
if(EXPECT STREQUAL "fail")
  string(REGEX MATCH "[^\n]*(: error|: fatal error|error #|error C[0-9])[^\n]*" first_error
         "${output}")
  # clang prints the sentence in pieces (include/tpx/core/compile_error.hpp): join them.
  string(REGEX REPLACE "\"}, text_piece<[0-9UL]+>{\"" "" first_error "${first_error}")
  message("tpx-compile-check: first error: ${first_error}")
endif()

if(EXPECT STREQUAL "fail" AND result EQUAL 0)
  message(FATAL_ERROR "tpx-compile-check: ${TARGET} compiled, but it must be rejected")
elseif(EXPECT STREQUAL "pass" AND NOT result EQUAL 0)
  message(FATAL_ERROR "tpx-compile-check: ${TARGET} did not compile")
endif()
