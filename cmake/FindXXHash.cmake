# Finds libxxhash, the xxHash library (Debian: libxxhash-dev), and gives it as the imported target
# XXHash::XXHash (the library plus the directory holding xxhash.h).
#
# tpx::io checksums checkpoint files and manifests with XXH64 (io/checksum.hpp) through this
# library. pkg-config's libxxhash.pc, when there is one, hints where to look; find_path and
# find_library do the finding, so a copy built by hand under CMAKE_PREFIX_PATH (or XXHash_ROOT)
# is found too. XXH64_createState must link, so a library too old for the streaming API is
# reported here rather than as an undefined symbol in a test. The installed tpxConfig.cmake
# runs this same file.
include(CheckCXXSourceCompiles)
include(CMakePushCheckState)
include(FindPackageHandleStandardArgs)

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_XXHash QUIET libxxhash)
endif()

find_path(XXHash_INCLUDE_DIR xxhash.h HINTS ${PC_XXHash_INCLUDE_DIRS})
find_library(XXHash_LIBRARY NAMES xxhash HINTS ${PC_XXHash_LIBRARY_DIRS})

if(XXHash_INCLUDE_DIR AND XXHash_LIBRARY)
  cmake_push_check_state(RESET)
  set(CMAKE_REQUIRED_QUIET ON)
  set(CMAKE_REQUIRED_INCLUDES "${XXHash_INCLUDE_DIR}")
  set(CMAKE_REQUIRED_LIBRARIES "${XXHash_LIBRARY}")
  check_cxx_source_compiles([[
    #include <xxhash.h>
    int main() {
      XXH64_state_t* state = XXH64_createState();
      XXH64_reset(state, 0);
      XXH64_update(state, "tpx", 3);
      const XXH64_hash_t h = XXH64_digest(state);
      XXH64_freeState(state);
      return h == XXH64("tpx", 3, 0) ? 0 : 1;
    }]] XXHash_LINKS_XXH64_STREAMING)
  cmake_pop_check_state()
endif()

find_package_handle_standard_args(XXHash
  REQUIRED_VARS XXHash_LIBRARY XXHash_INCLUDE_DIR XXHash_LINKS_XXH64_STREAMING
  REASON_FAILURE_MESSAGE "tpx::io needs libxxhash (XXH64). On Debian or Ubuntu: apt-get install libxxhash-dev")

if(XXHash_FOUND AND NOT TARGET XXHash::XXHash)
  add_library(XXHash::XXHash UNKNOWN IMPORTED)
  set_target_properties(XXHash::XXHash PROPERTIES
    IMPORTED_LOCATION "${XXHash_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${XXHash_INCLUDE_DIR}")
endif()
mark_as_advanced(XXHash_INCLUDE_DIR XXHash_LIBRARY)
