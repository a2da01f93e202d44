// device_like_space: host_space as the device space offers it, the base of the host stand-ins for
// a GPU's memory space (counting_space.hpp, recording_space.hpp). Its memory is host memory and
// its functions are host_space's, but host_accessible is false, so Tensor::local() does not
// compile for its tensors, as for cuda::device_space; and the functions host_space has that the
// device space lacks are deleted, so that every layer takes the path it takes on a GPU. That is
// one today: the host's row kernel for attention's softmax (tensor/host_causal_softmax.hpp), in
// whose place attention runs the device's grid loops.
#pragma once

#include <cstdint>
#include <tpx/tensor/host_space.hpp>

namespace tpx::testing {

struct device_like_space : host_space {
  static constexpr bool host_accessible = false;

  template <class T>
  static void causal_softmax_rows(const rank_context&, std::int64_t, std::int64_t,
                                  kernels::query_block, float, T*) = delete;
};

}  // namespace tpx::testing
