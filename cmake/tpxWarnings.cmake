# The warning flags of tpx's own targets (tests, examples, benches), in one place, so that one
# option decides whether a warning stops the build:
#
#   tpx_target_warnings(target)
#       -Wall -Wextra -Wpedantic on target's C++ (-Wall -Wextra on nvcc's host compiler for its
#       .cu files; nvcc's own front end warns by default). With TPX_WERROR ON they are errors:
#       -Werror, and --Werror=all-warnings for nvcc. TPX_WERROR is OFF by default and ON in CI's
#       presets: users build with whatever compiler their cluster has, and a warning that
#       compiler adds must not stop their build; CI still keeps the code free of warnings.
#       tpx::tpx passes none of this on to its consumers.
#
# Third-party headers never stop a build. CMake gives the include dirs of imported targets
# (CLI11::CLI11, doctest::doctest, nlohmann_json::nlohmann_json, CBLAS::CBLAS, NCCL::nccl,
# CUDA::*) as system dirs (-isystem, -isystem= for nvcc), where compilers do not warn, except
# dirs the compiler searches anyway, which it leaves off the command line. Dirs searched because
# they are in CPATH or CPLUS_INCLUDE_PATH (an offline prefix of unpacked packages, say) are
# ordinary, warning dirs to the compiler, whose warnings there then stop a CI build (nvcc's front
# end reported CLI11's TypeTools.hpp:151, #2361, when the CUDA trainers still parsed CLI11); so
# tpx_target_warnings declares those dirs -isystem for the target (a dir given both ways counts
# as a system dir). /usr/include and /usr/local/include are left alone: they are system dirs
# already, and -isystem on them breaks #include_next.
include_guard(GLOBAL)

function(tpx_target_warnings target)
  set(cxx -Wall -Wextra -Wpedantic)
  set(cuda -Xcompiler=-Wall,-Wextra)
  if(TPX_WERROR)
    list(APPEND cxx -Werror)
    set(cuda --Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror)
  endif()

  set(env_dirs "$ENV{CPATH}:$ENV{CPLUS_INCLUDE_PATH}")
  string(REPLACE ":" ";" env_dirs "${env_dirs}")
  foreach(dir IN LISTS env_dirs)
    if(dir AND IS_DIRECTORY "${dir}" AND NOT dir MATCHES "^/usr(/local)?/include/?$")
      list(APPEND cxx "-isystem${dir}")   # one word: CMake de-duplicates options
      list(APPEND cuda "-isystem=${dir}")
    endif()
  endforeach()

  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:${cxx}>"
    "$<$<COMPILE_LANGUAGE:CUDA>:${cuda}>")
endfunction()
