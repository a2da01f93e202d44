# Run by CTest (cmake -P) for the consumer_* tests: builds and runs the sample project
# examples/consumer against tpx, from scratch in WORK_DIR, as a user would.
#   MODE=subdirectory  the consumer adds tpx's sources (TPX_SOURCE_DIR) with add_subdirectory.
#   MODE=package       tpx's build tree (TPX_BINARY_DIR) is installed into WORK_DIR/prefix and the
#                      consumer finds it there with find_package(tpx CONFIG).
# The consumer uses the generator, compiler, launcher and build type of tpx's own build.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    list(JOIN ARGV " " command)
    message(FATAL_ERROR "tpx consumer (${MODE}): failed (${result}): ${command}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(configure
  "${CMAKE_COMMAND}" -S "${TPX_SOURCE_DIR}/examples/consumer" -B "${WORK_DIR}/build"
  -G "${GENERATOR}" "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
if(MODE STREQUAL "subdirectory")
  list(APPEND configure "-DTPX_SOURCE_DIR=${TPX_SOURCE_DIR}")
elseif(MODE STREQUAL "package")
  run("${CMAKE_COMMAND}" --install "${TPX_BINARY_DIR}" --prefix "${WORK_DIR}/prefix")
  list(APPEND configure "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
else()
  message(FATAL_ERROR "tpx consumer: MODE must be subdirectory or package, not '${MODE}'")
endif()

run(${configure})
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/tpx-consumer")
