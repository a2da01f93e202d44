// A file that includes tpx's CUDA headers and launches nothing: what every user's file pays for.
// The build compiles it to PTX; cuda_header_kernels_test fails on any kernel of tpx's in it
// (tests/cuda/header_kernels.cmake).
#include <tpx/cuda/cuda.hpp>

int main() { return 0; }
