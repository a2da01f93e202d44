// Tensor<T, Dims...>: one rank's shard of a global tensor whose sharding is its type.
//
// `Tensor<float, B<X>, D<Y>>` is In[B_X, D_Y]: rank (x, y) holds the x-th block of B and the y-th
// block of D, row-major in the order the dims are listed. `Unreduced<X>` as the last argument
// marks a partial sum over X (the notes' {U_X}). The global extents are run-time values; the
// local block follows from them and the rank's mesh coordinates (split.hpp), so a tensor always
// knows which global indices it holds. That is what lets tpx check results against an unsharded
// reference, print what a collective will do, and move shards between layouts.
//
// An invalid sharding (an axis on two dims, an axis both sharding and unreduced) is a compile
// error naming the dims and the axis. Elements live in the memory space Space (host memory for
// tpx::Tensor, see host_space.hpp); every tensor remembers the rank_context it belongs to.
// local(), the block as a span the host may read and write, exists only for spaces the host can
// address (host_accessible_v): for a device tensor it does not compile, so code generic over the
// space cannot touch device memory from the host, nor copy it there, by accident. The one way
// across is a named copy (tensor/staging.hpp). elements() is the block as a span of the space's
// own memory, for handing to that space's functions and to communicators.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpx/core/compile_error.hpp"
#include "tpx/sharding/sharding.hpp"
#include "tpx/sharding/split.hpp"
#include "tpx/spmd/rank_context.hpp"
#include "tpx/tensor/box_copy.hpp"
#include "tpx/tensor/host_space.hpp"
#include "tpx/tensor/shape.hpp"

namespace tpx {

namespace detail {
// Reports an invalid sharding through compile_error (the one diagnostic the user sees).
template <class... Args>
constexpr bool check_sharding() {
  using traits = sharding_traits<Args...>;
  if constexpr (!traits::valid) compile_error<traits::problem>{};
  return true;
}

// "X, Y": the names of a list of mesh axes, for messages.
template <class Axes>
struct axis_list_text;
template <class... Axes>
struct axis_list_text<type_list<Axes...>> {
  static constexpr auto value = freeze<[] {
    static_string<80> text;
    int i = 0;
    ((text += (i++ > 0 ? ", " : ""), text += Axes::name), ...);
    return text;
  }>();
};
template <class Axes>
constexpr auto axis_list() {
  return axis_list_text<Axes>::value;
}

template <class Dims>
struct shape_of;
template <class... Dims>
struct shape_of<type_list<Dims...>> {
  using type = Shape<unsplit_t<Dims>...>;
};
}  // namespace detail

// Whether the host may dereference pointers into Space's memory (Space::host_accessible).
template <class Space>
inline constexpr bool host_accessible_v = [] {
  if constexpr (requires { Space::host_accessible; })
    return bool(Space::host_accessible);
  else
    return false;
}();

// Tag of BasicTensor's constructor that takes over another tensor's elements under new dim names.
struct relabel_t {
  explicit relabel_t() = default;
};

// The tag of the tensor constructor that leaves the elements unwritten:
// `Result out(ctx, shape, tpx::for_overwrite);` (as std::make_unique_for_overwrite).
struct for_overwrite_t {
  explicit for_overwrite_t() = default;
};
inline constexpr for_overwrite_t for_overwrite{};

template <class Space, class T, class... Spec>
class BasicTensor {
  static_assert(detail::check_sharding<Spec...>(), "tpx: invalid sharding (see above)");

 public:
  using space = Space;
  using value_type = T;
  using traits = sharding_traits<Spec...>;
  using dims = typename traits::dims;
  using unreduced = typename traits::unreduced;
  using shape_type = typename detail::shape_of<dims>::type;
  static constexpr std::size_t order = dims::size;
  using extents_type = index_array<order>;
  // The notes' notation of the type, e.g. "[B_X, D_Y]".
  static constexpr auto notation = traits::notation;

  // A zero-filled shard of a tensor of the given global shape.
  BasicTensor(const rank_context& context, const shape_type& global)
      : context_(&context), global_(global.extents) {
    locate(std::make_index_sequence<order>{});
    data_ =
        Space::template make_buffer<T>(context, static_cast<std::size_t>(element_count(local_)));
  }

  // The same with elements of unspecified value, for an output that is then written whole (by a
  // GEMM with beta = 0, an elementwise op, a collective): no pass of zeros first.
  BasicTensor(const rank_context& context, const shape_type& global, for_overwrite_t)
      : context_(&context), global_(global.extents) {
    locate(std::make_index_sequence<order>{});
    data_ = Space::template make_buffer_for_overwrite<T>(
        context, static_cast<std::size_t>(element_count(local_)));
  }

  // The same, made with a typed rank (Rank<Mesh<X, Y>>): an axis the mesh lacks is a compile
  // error ("mesh axis Z is not an axis of this mesh"), as for the factories.
  template <class R>
  requires(std::is_base_of_v<rank_context, R> && requires { typename R::mesh_type; })
  BasicTensor(const R& rank, const shape_type& global)
      : BasicTensor(static_cast<const rank_context&>(rank), global) {
    [&]<class... Axes>(type_list<Axes...>) {
      (R::mesh_type::template index_of<Axes>(), ...);
    }(typename traits::axes{});
  }

  // A partial sum never converts implicitly: summing it over its unreduced axes is a
  // collective, and tpx spells every collective at its call site (reshard<Target>(t),
  // all_reduce<X>(t), matmul<Target>(a, b)), so that no rank runs one without its code saying
  // so. This constructor exists only to say that, instead of the compiler's "no conversion".
  template <class... Other>
  requires(!std::is_same_v<typename sharding_of<Other...>::unreduced, Unreduced<>> &&
           !std::is_same_v<BasicTensor<Space, T, Other...>, BasicTensor>)
  BasicTensor(const BasicTensor<Space, T, Other...>&)  // NOLINT: implicit, to reject it
      : context_(nullptr) {
    using From = BasicTensor<Space, T, Other...>;
    compile_error<"tpx: tensor " + From::notation + " does not convert implicitly to " +
                  notation + ": reducing a partial sum over mesh axes " +
                  detail::axis_list<typename From::unreduced::axes>() +
                  " is a collective; call tpx::reshard<Target>(t) (or matmul<Target>(a, b))">{};
  }

  // The elements of `from`, whose dims have the same extents and splits under other names (or
  // splits that differ only by axes of one rank): its buffer moves here, nothing is copied. The
  // callers check that: tpx::rename the names (ops/rename.hpp), the collectives the axis's size
  // (ops/collectives.hpp).
  template <class... Other>
  BasicTensor(relabel_t, BasicTensor<Space, T, Other...>&& from)
      : context_(from.context_),
        global_(from.global_),
        local_(from.local_),
        offset_(from.offset_),
        data_(std::move(from.data_)) {}

  const rank_context& context() const { return *context_; }
  const extents_type& global_extents() const { return global_; }
  const extents_type& local_extents() const { return local_; }
  // First global index, along each dim, of the block this rank holds.
  const extents_type& local_offsets() const { return offset_; }
  std::int64_t global_extent(std::size_t d) const { return global_[d]; }
  std::int64_t local_extent(std::size_t d) const { return local_[d]; }
  std::int64_t local_offset(std::size_t d) const { return offset_[d]; }
  shape_type shape() const { return shape_type(global_); }

  // This rank's block, row-major, for the host to read and write: host memory only.
  std::span<T> local()
    requires host_accessible_v<Space>
  {
    return data_;
  }
  std::span<const T> local() const
    requires host_accessible_v<Space>
  {
    return data_;
  }
  // This rank's block as a span of Space's memory: for Space's functions and communicators.
  std::span<T> elements() { return data_; }
  std::span<const T> elements() const { return data_; }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  std::size_t size() const { return data_.size(); }

 private:
  template <std::size_t... D>
  void locate(std::index_sequence<D...>) {
    (locate_dim<D>(typename type_at_t<D, dims>::axes{}), ...);
  }
  template <std::size_t D, class... Axes>
  void locate_dim(type_list<Axes...>) {
    if (global_[D] < 0)
      throw std::invalid_argument("tpx: tensor " + std::string(notation.c_str()) + ": dim " +
                                  std::string(type_at_t<D, dims>::name.c_str()) +
                                  " has negative extent " + std::to_string(global_[D]));
    block b{0, global_[D]};
    ((b = split_block(b, context_->axis<Axes>().size, context_->axis<Axes>().coord)), ...);
    offset_[D] = b.offset;
    local_[D] = b.size;
  }

  template <class, class, class...>
  friend class BasicTensor;

  const rank_context* context_;
  extents_type global_{};
  extents_type local_{};
  extents_type offset_{};
  typename Space::template buffer<T> data_;
};

template <class T, class... Spec>
using Tensor = BasicTensor<host_space, T, Spec...>;

template <class X>
inline constexpr bool is_tensor_v = false;
template <class Space, class T, class... Spec>
inline constexpr bool is_tensor_v<BasicTensor<Space, T, Spec...>> = true;

template <class X>
concept AnyTensor = is_tensor_v<std::remove_cvref_t<X>>;

// The tensor type with the same space and element type as Like, and the given dims and
// unreduced axes (Unreduced<> is dropped, so equal shardings give one type).
template <class Like, class Dims, class Unred>
struct tensor_with;
template <class Space, class T, class... Spec, class... Dims, class... Unred>
struct tensor_with<BasicTensor<Space, T, Spec...>, type_list<Dims...>, unreduced_over<Unred...>> {
  using type = std::conditional_t<sizeof...(Unred) == 0, BasicTensor<Space, T, Dims...>,
                                  BasicTensor<Space, T, Dims..., Unreduced<Unred...>>>;
};
template <class Like, class Dims, class Unred>
using tensor_with_t = typename tensor_with<Like, Dims, Unred>::type;

}  // namespace tpx
