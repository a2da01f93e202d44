# Finds NVIDIA's NCCL (the collective library of tpx's multi-GPU backend) and gives it as the
# imported target NCCL::nccl: libnccl plus the directory holding nccl.h, a system include dir
# (its warnings are NCCL's, never tpx's).
#
# Where to look, in order: NCCL_ROOT (a variable or environment variable: an install prefix or
# an unpacked tarball), then the CUDA toolkit (CUDA 13 ships NCCL inside it: include/nccl.h and
# lib64/libnccl.so), then the system and CMAKE_PREFIX_PATH (Debian's libnccl-dev: /usr/include
# and the multiarch lib dir), and last NVIDIA's Python wheel (pip install nvidia-nccl-cu12 or
# -cu13: site-packages/nvidia/nccl/{include,lib}, whose library is only libnccl.so.2), asked of
# the python3 on PATH (or Python3_EXECUTABLE). The version comes from NCCL_MAJOR/MINOR/PATCH in
# nccl.h and is checked against the one find_package asks for. Sets NCCL_FOUND, NCCL_VERSION,
# NCCL_INCLUDE_DIR, NCCL_LIBRARY (cache variables: set them to skip the search). The installed
# tpxConfig.cmake runs this same file when tpx was built with TPX_CUDA.
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
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints}
             PATH_SUFFIXES lib64 lib)
unset(_nccl_hints)

# NVIDIA's wheel, when the search above found no complete NCCL: header and library then both
# come from the wheel (not one from a runtime-only system package and one from the wheel).
# nvidia.nccl is a namespace package (no __file__), so its folder is __path__[0].
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  if(Python3_EXECUTABLE)
    set(_nccl_python "${Python3_EXECUTABLE}")
  else()
    find_program(_nccl_python NAMES python3 NO_CACHE)
  endif()
  if(_nccl_python)
    execute_process(
      COMMAND "${_nccl_python}" -c "import nvidia.nccl as n; print(list(n.__path__)[0])"
      OUTPUT_VARIABLE _nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
      RESULT_VARIABLE _nccl_python_status)
    if(_nccl_python_status EQUAL 0 AND EXISTS "${_nccl_wheel}/include/nccl.h")
      find_library(_nccl_wheel_library NAMES nccl libnccl.so.2 NAMES_PER_DIR
                   HINTS "${_nccl_wheel}/lib" NO_DEFAULT_PATH NO_CACHE)
      if(_nccl_wheel_library)
        set(NCCL_INCLUDE_DIR "${_nccl_wheel}/include" CACHE PATH "Directory holding nccl.h" FORCE)
        set(NCCL_LIBRARY "${_nccl_wheel_library}" CACHE FILEPATH "libnccl" FORCE)
      endif()
      unset(_nccl_wheel_library)
    endif()
  endif()
  unset(_nccl_python)
  unset(_nccl_wheel)
  unset(_nccl_python_status)
endif()

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
  VERSION_VAR NCCL_VERSION
  REASON_FAILURE_MESSAGE "looked in NCCL_ROOT, the CUDA toolkit, the system, CMAKE_PREFIX_PATH \
and NVIDIA's Python wheel. Set NCCL_ROOT to a prefix holding include/nccl.h and lib/libnccl.so, \
or install libnccl-dev, or pip install nvidia-nccl-cu13 (or -cu12).")
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
