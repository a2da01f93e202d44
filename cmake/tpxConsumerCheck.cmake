# Run by CTest (cmake -P) for the consumer_* tests: builds and runs the sample project
# examples/consumer against tpx, from scratch in WORK_DIR, as a user would.
#   MODE=subdirectory  the consumer adds tpx's sources (TPX_SOURCE_DIR) with add_subdirectory.
#   MODE=package       tpx's build tree (TPX_BINARY_DIR) is installed into WORK_DIR/prefix and the
#                      consumer finds it there with find_package(tpx CONFIG).
#   CUDA=ON            the consumer also builds main.cu on tpx::cuda (-DTPX_CONSUMER_CUDA=ON,
#                      asking the package for its cuda component) with the CUDA_COMPILER,
#                      CUDA_LAUNCHER and CUDA_ARCHITECTURES given (one architecture: the test
#                      is the build). The program runs where there is a GPU; without one it
#                      reports itself skipped, and the test passes.
#   WITHOUT_CUDA=ON    (package mode) everything runs in a view of the machine where CMake
#                      cannot find the CUDA toolkit (cmake/tpxWithoutCuda.cmake). The consumer
#                      must configure, build and run there; its cache must show that nothing
#                      looked for CUDA, NCCL or nlohmann_json; and tests/package_probe must find
#                      that the cuda component is missing, with tpx's reason, whichever way it
#                      is asked for.
# The consumer uses the generator, compilers, launchers and build type of tpx's own build.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    list(JOIN ARGV " " command)
    message(FATAL_ERROR "tpx consumer (${MODE}): failed (${result}): ${command}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(view "")  # a command prefix, `cmake -E env ...`, in the WITHOUT_CUDA view
set(common_args
  -G "${GENERATOR}" "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
if(WITHOUT_CUDA)
  include("${CMAKE_CURRENT_LIST_DIR}/tpxWithoutCuda.cmake")
  tpx_without_cuda(view "${WORK_DIR}/without_cuda.cmake")
  list(APPEND common_args -C "${WORK_DIR}/without_cuda.cmake")
endif()
set(configure
  ${view} "${CMAKE_COMMAND}" -S "${TPX_SOURCE_DIR}/examples/consumer" -B "${WORK_DIR}/build"
  ${common_args})
if(CUDA)
  list(APPEND configure -DTPX_CONSUMER_CUDA=ON "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}"
       "-DCMAKE_CUDA_COMPILER_LAUNCHER=${CUDA_LAUNCHER}"
       "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}")
endif()
if(MODE STREQUAL "subdirectory")
  list(APPEND configure "-DTPX_SOURCE_DIR=${TPX_SOURCE_DIR}")
elseif(MODE STREQUAL "package")
  run("${CMAKE_COMMAND}" --install "${TPX_BINARY_DIR}" --prefix "${WORK_DIR}/prefix")
  list(APPEND configure "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
else()
  message(FATAL_ERROR "tpx consumer: MODE must be subdirectory or package, not '${MODE}'")
endif()

run(${configure})
run(${view} "${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
run(${view} "${WORK_DIR}/build/tpx-consumer")
if(CUDA)
  execute_process(COMMAND "${WORK_DIR}/build/tpx-consumer-cuda" RESULT_VARIABLE result)
  if(NOT result EQUAL 0 AND NOT result EQUAL 77)
    message(FATAL_ERROR "tpx consumer (${MODE}): tpx-consumer-cuda failed (${result})")
  endif()
endif()

if(WITHOUT_CUDA)
  # The consumer asked for tpx::tpx only: no dependency of another component was looked for.
  file(STRINGS "${WORK_DIR}/build/CMakeCache.txt" looked REGEX "^(CUDAToolkit|NCCL|nlohmann_json)_")
  if(looked)
    list(JOIN looked "\n  " looked)
    message(FATAL_ERROR "tpx consumer: find_package(tpx) looked for other components' "
                        "dependencies:\n  ${looked}")
  endif()

  # Every way of asking for the cuda component. CUDAToolkit is disabled outright too, for
  # machines whose toolkit sits in /usr/bin and cannot be hidden from the compiler's PATH.
  set(probe
    ${view} "${CMAKE_COMMAND}" -S "${TPX_SOURCE_DIR}/tests/package_probe" ${common_args}
    "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
  run(${probe} -B "${WORK_DIR}/probe_answers" -DPROBE=answers)
  execute_process(COMMAND ${probe} -B "${WORK_DIR}/probe_required" -DPROBE=required
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  string(REGEX REPLACE "[ \n]+" " " output "${output}")  # CMake wraps the reason's lines
  if(result EQUAL 0 OR NOT output MATCHES "tpx: component cuda needs the CUDA toolkit")
    message(FATAL_ERROR "tpx consumer: find_package(tpx REQUIRED COMPONENTS cuda) without CUDA "
                        "must stop with tpx's reason; it gave (${result}):\n${output}")
  endif()
endif()
