# cuda_header_kernels_test: a file that only includes tpx/cuda/cuda.hpp (header/includes_only.cu,
# compiled to PTX by the build: the target tpx_cuda_header_ptx) compiles no kernel of tpx's. A
# kernel template launched from a non-template inline function is instantiated in every file
# that includes it, used or not (docs/ci.md, "A kernel is compiled only where it is launched"):
# the nine tensor-core attention kernels were, in every CUDA file of the build and of its users.
# The PTX's entries are the kernels the file compiled; one of tpx's (a mangled name in namespace
# tpx: `3tpx`) fails the test, named.
#
#   cmake -DPTX=.../includes_only.ptx -P header_kernels.cmake
if(NOT DEFINED PTX OR NOT EXISTS "${PTX}")
  message(FATAL_ERROR "header_kernels.cmake: -DPTX=... names no file (\"${PTX}\"): build "
                      "tpx_cuda_header_ptx first")
endif()
file(STRINGS "${PTX}" entries REGEX "\\.entry ")
list(LENGTH entries count)
set(ours "")
foreach(entry IN LISTS entries)
  if(entry MATCHES "\\.entry[ \t]+([A-Za-z0-9_]+)" AND CMAKE_MATCH_1 MATCHES "3tpx")
    list(APPEND ours "  ${CMAKE_MATCH_1}")
  endif()
endforeach()
if(ours)
  list(JOIN ours "\n" ours)
  message(FATAL_ERROR "a file that only includes tpx/cuda/cuda.hpp compiles tpx kernels it never "
                      "launches (a kernel template launched from a non-template function?):\n${ours}")
endif()
message(STATUS "includes_only.cu: ${count} kernel(s) in its PTX, none of them tpx's")
