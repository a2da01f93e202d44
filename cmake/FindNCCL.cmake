# Finds NVIDIA's NCCL (the collective library of tpx's multi-GPU backend) and gives it as the
# imported target NCCL::nccl: libnccl plus the directory holding nccl.h.
#
# Where to look, in order: NCCL_ROOT (a variable or environment variable: an install prefix or
# an unpacked tarball), then the CUDA toolkit (CUDA 13 ships NCCL inside it: include/nccl.h and
# lib64/libnccl.so), then the system (Debian's libnccl-dev: /usr/include and the multiarch
# lib dir). The version comes from NCCL_MAJOR/MINOR/PATCH in nccl.h and is checked against the
# one find_package asks for. Sets NCCL_FOUND, NCCL_VERSION, NCCL_INCLUDE_DIR, NCCL_LIBRARY.
# The installed tpxConfig.cmake runs this same file when tpx was built with TPX_CUDA.
include(FindPackageHandleStandardArgs)

set(_nccl_hints)
foreach(root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_TARGET_DIR}")
  if(root)
    list(APPEND _nccl_hints "${root}")
  endif()
endforeach()
if(CUDAToolkit_INCLUDE_DIRS)
  foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    get_filename_component(parent "${dir}" DIRECTORY)
    list(APPEND _nccl_hints "${parent}")
  endforeach()
endif()
list(APPEND _nccl_hints /usr/local/cuda)

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${_nccl_hints} PATH_SUFFIXES lib64 lib)
unset(_nccl_hints)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(part IN ITEMS MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define NCCL_${part} +([0-9]+).*" "\\1" _nccl_${part} "${_nccl_version_lines}")
  endforeach()
  set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
  unset(_nccl_version_lines)
  unset(_nccl_MAJOR)
  unset(_nccl_MINOR)
  unset(_nccl_PATCH)
endif()

find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
