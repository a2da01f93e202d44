# A view of this machine in which CMake cannot find the CUDA toolkit, for the host-only consumer
# test (cmake/tpxConsumerCheck.cmake): proof that a project asking tpx for tpx::tpx alone
# configures, builds and runs where there is no CUDA, checked on CI machines that have it.
#
#   tpx_without_cuda(<env_var> <cache_file>)
#       <env_var>: a command prefix, `cmake -E env ...`, that runs a command with the CUDA
#       variables unset (CUDACXX, CUDA_PATH, CUDA_HOME, CUDAToolkit_ROOT, NCCL_ROOT, ...) and a
#       PATH without the directories holding nvcc;
#       <cache_file>: written here, for a configure's -C: CMAKE_IGNORE_PATH (those directories
#       and the toolkit roots) and CMAKE_IGNORE_PREFIX_PATH (the roots), so that no find_*
#       command (FindCUDAToolkit looks in /usr/local/cuda and /usr/local/cuda-* on its own)
#       sees them.
#
# The toolkit roots are /usr/local/cuda, /usr/local/cuda-X.Y and those the CUDA variables name.
# /usr/bin and /bin stay: the compiler needs them, so a distribution's toolkit installed there
# is not hidden by this view (a check that must not find CUDA disables CUDAToolkit as well).
function(tpx_without_cuda env_var cache_file)
  set(cuda_variables CUDACXX CUDAHOSTCXX CUDAARCHS CUDA_PATH CUDA_HOME CUDA_ROOT CUDAToolkit_ROOT
                     NCCL_ROOT)
  file(GLOB roots LIST_DIRECTORIES true /usr/local/cuda /usr/local/cuda-*)
  foreach(variable IN LISTS cuda_variables)
    if(IS_DIRECTORY "$ENV{${variable}}")
      list(APPEND roots "$ENV{${variable}}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES roots)

  set(nvcc_dirs "")
  foreach(root IN LISTS roots)
    list(APPEND nvcc_dirs "${root}/bin")
  endforeach()
  string(REPLACE ":" ";" path "$ENV{PATH}")
  set(kept_path "")
  foreach(dir IN LISTS path)
    if(EXISTS "${dir}/nvcc" AND NOT dir MATCHES "^/(usr/)?bin/?$")
      list(APPEND nvcc_dirs "${dir}")
    else()
      list(APPEND kept_path "${dir}")
    endif()
  endforeach()
  list(JOIN kept_path ":" kept_path)
  list(REMOVE_DUPLICATES nvcc_dirs)

  set(env "${CMAKE_COMMAND}" -E env "PATH=${kept_path}")
  foreach(variable IN LISTS cuda_variables)
    list(APPEND env "--unset=${variable}")
  endforeach()
  set(${env_var} "${env}" PARENT_SCOPE)
  file(WRITE "${cache_file}"
    "set(CMAKE_IGNORE_PATH \"${nvcc_dirs};${roots}\" CACHE STRING \"\")\n"
    "set(CMAKE_IGNORE_PREFIX_PATH \"${roots}\" CACHE STRING \"\")\n")
endfunction()
