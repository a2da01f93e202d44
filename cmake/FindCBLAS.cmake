# Finds the BLAS tpx's host kernels call through its C interface, and gives it as the imported
# target CBLAS::CBLAS (the library plus the directory holding cblas.h).
#
# tpx needs OpenBLAS in particular: kernels/gemm_host.hpp calls cblas_sgemm and
# kernels/blas_threads.hpp calls openblas_set_num_threads. So BLA_VENDOR defaults to OpenBLAS
# (set it yourself to try another BLAS), and a test program calling both functions must link, so
# a BLAS without them is reported here rather than as an undefined symbol in a test. Debian puts
# cblas.h in /usr/include/<multiarch>/, which find_path searches; Fedora puts it in
# /usr/include/openblas/. The installed tpxConfig.cmake runs this same file.
include(CheckCXXSourceCompiles)
include(CMakePushCheckState)
include(FindPackageHandleStandardArgs)

if(NOT DEFINED BLA_VENDOR)
  set(BLA_VENDOR OpenBLAS)
  set(_cblas_unset_vendor TRUE)
endif()
find_package(BLAS QUIET)
if(_cblas_unset_vendor)
  unset(BLA_VENDOR)
  unset(_cblas_unset_vendor)
endif()

find_path(CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)

if(BLAS_FOUND AND CBLAS_INCLUDE_DIR)
  cmake_push_check_state(RESET)
  set(CMAKE_REQUIRED_QUIET ON)
  set(CMAKE_REQUIRED_INCLUDES "${CBLAS_INCLUDE_DIR}")
  set(CMAKE_REQUIRED_LIBRARIES ${BLAS_LIBRARIES})
  check_cxx_source_compiles([[
    #include <cblas.h>
    extern "C" void openblas_set_num_threads(int);
    int main() {
      float a = 1, b = 1, c = 0;
      openblas_set_num_threads(1);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.f, &a, 1, &b, 1, 0.f, &c, 1);
      return 0;
    }]] CBLAS_LINKS_SGEMM_AND_THREADS)
  cmake_pop_check_state()
endif()

find_package_handle_standard_args(CBLAS
  REQUIRED_VARS BLAS_LIBRARIES CBLAS_INCLUDE_DIR CBLAS_LINKS_SGEMM_AND_THREADS
  REASON_FAILURE_MESSAGE "tpx needs OpenBLAS (cblas_sgemm, openblas_set_num_threads). On Debian or Ubuntu: apt-get install libopenblas-dev")

if(CBLAS_FOUND AND NOT TARGET CBLAS::CBLAS)
  add_library(CBLAS::CBLAS INTERFACE IMPORTED)
  set_target_properties(CBLAS::CBLAS PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CBLAS_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${BLAS_LIBRARIES}")
endif()
mark_as_advanced(CBLAS_INCLUDE_DIR)
