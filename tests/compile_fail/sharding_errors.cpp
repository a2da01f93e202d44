// Programs tpx must reject at compile time, one per case, each with the sentence the compiler
// must print. tests/CMakeLists.txt reads the `// expect(CASE): text` lines below, compiles this
// file once per CASE with -DCASE, and passes only if compilation fails with a diagnostic that
// contains the text in its first error line (so a case that compiles, or fails for another
// reason first, fails the test).
//
// expect(AXIS_ON_TWO_DIMS): mesh axis X shards both dim B and dim D
// expect(AXIS_TWICE_IN_DIM): mesh axis Y splits dim B twice
// expect(DIM_TWICE): dim B appears twice
// expect(SHARDED_AND_UNREDUCED): mesh axis X shards dim B and is also unreduced
// expect(AXIS_NOT_IN_MESH): mesh axis Z is not an axis of this mesh
// expect(CONTRACTION_DIM_MISSING): the left operand has no dim F
// expect(RESULT_AXIS_ON_TWO_DIMS): tensor \[I_X, K_X\]: mesh axis X shards both dim I and dim K
// expect(UNREDUCED_MEETS_AXIS): the left operand is unreduced over X and the right one also uses X
// expect(NO_SHARED_DIM): the operands must share exactly one dim
// expect(GATHER_UNSHARDED_AXIS): all_gather<Y>: tensor \[B_X, D\] is not sharded over mesh axis Y
// expect(GATHER_OUTER_SPLIT): mesh axis X is not the innermost split of dim B in \[B_XY, D\]
// expect(GATHER_UNREDUCED): all_gather<X>: tensor \[B, D\]{U_X} is unreduced over X, not sharded
// expect(REDUCE_REDUCED): reduce_scatter<X, D>: tensor \[B, D\] is not unreduced over X
// expect(ALL_REDUCE_MAX_REDUCED): all_reduce_max<X>: tensor \[B, D\] is not unreduced over X
// expect(INVENT_PARTIAL_SUMS): reshard to an unreduced tensor over X from one that is not
// expect(TRANSPOSE): the dims differ or are in another order
// expect(CHECKPOINT_PARTIAL_SUM): checkpoint: tensor \[B, F\]{U_X} is unreduced
// expect(TENSOR_AXIS_NOT_IN_MESH): mesh axis Z is not an axis of this mesh
// expect(RESHARD_TARGET_NOT_IN_MESH): reshard to \[I_Z, J\]: mesh axis Z is not an axis of the mesh \(X, Y\)
// expect(MATMUL_TARGET_NOT_IN_MESH): matmul to \[I_X, K_Z\]: mesh axis Z is not an axis of the mesh \(X, Y\)
// expect(SLICE_AXIS_NOT_IN_MESH): slice<Z, J>: mesh axis Z is not an axis of the mesh \(X, Y\)
// expect(PERMUTE_NOT_A_PERMUTATION): permute of \[I_X, J\]: the dims listed must be every dim of the tensor, each once
// expect(IMPLICIT_REDUCTION): \[I, K\].U_X. does not convert implicitly to \[I, K_X\]: reducing a partial sum over mesh axes X is a collective
// expect(IMPLICIT_REDUCTION_ARGUMENT): \[I, K\].U_XY. does not convert implicitly to \[I, K\]: reducing a partial sum over mesh axes X, Y is a collective
// expect(ADD_DIFFERENT_SHARDINGS): elementwise operation on \[B_X, D\] and \[B, D_X\]: the shardings differ
// expect(ROLL_UNSPLIT_DIM): roll<X, D>: dim D of \[B_X, D\] is not split over mesh axis X
// expect(ROLL_OUTER_SPLIT): roll<X, B>: mesh axis X is not the innermost split of dim B in \[B_XY, D\]
// expect(PIPELINE_STAGE_DIM): pipeline<X, B>: stage dim B of \[B_YX, D\] must be split over mesh axis X alone
#include <tpx/tpx.hpp>
// Only the checkpoint case reads the checkpoint headers: parsing them (nlohmann/json) is most of
// the compile time of a case, and every case is compiled on its own, one at a time.
#if defined(CHECKPOINT_PARTIAL_SUM)
#include <tpx/io/checkpoint.hpp>
#endif
#if defined(PIPELINE_STAGE_DIM)
#include <tpx/nn/pipeline.hpp>
#endif

TPX_MESH_AXES(X, Y, Z);
TPX_DIMS(B, D, F, I, J, K, L);

using tpx::Tensor;
using tpx::Unreduced;

template <class Tn>
const Tn& some() {
  static const Tn* none = nullptr;
  return *none;
}

void body(const tpx::Rank<tpx::Mesh<X, Y>>& rank) {
  (void)rank;
#if defined(AXIS_ON_TWO_DIMS)
  Tensor<float, B<X>, D<X>> t(rank, {B(4), D(4)});
#elif defined(AXIS_TWICE_IN_DIM)
  Tensor<float, B<Y, Y>, D<>> t(rank, {B(4), D(4)});
#elif defined(DIM_TWICE)
  Tensor<float, B<X>, B<Y>> t(rank, {B(4), B(4)});
#elif defined(SHARDED_AND_UNREDUCED)
  Tensor<float, B<X>, D<>, Unreduced<X>> t(rank, {B(4), D(4)});
#elif defined(AXIS_NOT_IN_MESH)
  auto t = tpx::randn<float, B<Z>, D<>>(rank, {B(4), D(4)}, 1);
#elif defined(CONTRACTION_DIM_MISSING)
  auto t = tpx::contract<F>(some<Tensor<float, B<X>, D<>>>(), some<Tensor<float, D<>, K<>>>());
#elif defined(RESULT_AXIS_ON_TWO_DIMS)
  auto t = tpx::matmul<Tensor<float, I<X>, K<X>>>(some<Tensor<float, I<X>, J<>>>(),
                                                  some<Tensor<float, J<>, K<X>>>());
#elif defined(UNREDUCED_MEETS_AXIS)
  auto t = tpx::matmul(some<Tensor<float, I<>, J<>, Unreduced<X>>>(),
                       some<Tensor<float, J<>, K<X>>>());
#elif defined(NO_SHARED_DIM)
  auto t = tpx::matmul(some<Tensor<float, I<>, J<>>>(), some<Tensor<float, K<>, L<>>>());
#elif defined(GATHER_UNSHARDED_AXIS)
  auto t = tpx::all_gather<Y>(some<Tensor<float, B<X>, D<>>>());
#elif defined(GATHER_OUTER_SPLIT)
  auto t = tpx::all_gather<X>(some<Tensor<float, B<X, Y>, D<>>>());
#elif defined(GATHER_UNREDUCED)
  auto t = tpx::all_gather<X>(some<Tensor<float, B<>, D<>, Unreduced<X>>>());
#elif defined(REDUCE_REDUCED)
  auto t = tpx::reduce_scatter<X, D>(some<Tensor<float, B<>, D<>>>());
#elif defined(ALL_REDUCE_MAX_REDUCED)
  auto t = tpx::all_reduce_max<X>(some<Tensor<float, B<>, D<>>>());
#elif defined(INVENT_PARTIAL_SUMS)
  auto t = tpx::reshard<B<>, D<>, Unreduced<X>>(some<Tensor<float, B<>, D<>>>());
#elif defined(TRANSPOSE)
  auto t = tpx::reshard<D<>, B<>>(some<Tensor<float, B<>, D<>>>());
#elif defined(TENSOR_AXIS_NOT_IN_MESH)
  Tensor<float, B<Z>, D<>> t(rank, {B(4), D(4)});
#elif defined(RESHARD_TARGET_NOT_IN_MESH)
  auto t = tpx::reshard<I<Z>, J<>>(rank, some<Tensor<float, I<X>, J<>>>());
#elif defined(MATMUL_TARGET_NOT_IN_MESH)
  auto t = tpx::matmul<I<X>, K<Z>>(rank, some<Tensor<float, I<X>, J<>>>(),
                                   some<Tensor<float, J<>, K<Y>>>());
#elif defined(SLICE_AXIS_NOT_IN_MESH)
  auto t = tpx::slice<Z, J>(rank, some<Tensor<float, I<X>, J<>>>());
#elif defined(PERMUTE_NOT_A_PERMUTATION)
  auto t = tpx::permute<J, J>(some<Tensor<float, I<X>, J<>>>());
#elif defined(IMPLICIT_REDUCTION)
  Tensor<float, I<>, K<X>> t =
      tpx::matmul(some<Tensor<float, I<>, J<X>>>(), some<Tensor<float, J<X>, K<>>>());
#elif defined(IMPLICIT_REDUCTION_ARGUMENT)
  auto take = [](const Tensor<float, I<>, K<>>& reduced) { return reduced.size(); };
  auto t = take(some<Tensor<float, I<>, K<>, Unreduced<Y, X>>>());
#elif defined(ADD_DIFFERENT_SHARDINGS)
  auto t = some<Tensor<float, B<X>, D<>>>() + some<Tensor<float, B<>, D<X>>>();
#elif defined(ROLL_UNSPLIT_DIM)
  auto t = tpx::roll<X, D>(some<Tensor<float, B<X>, D<>>>(), 1);
#elif defined(ROLL_OUTER_SPLIT)
  auto t = tpx::roll<X, B>(some<Tensor<float, B<X, Y>, D<>>>(), 1);
#elif defined(PIPELINE_STAGE_DIM)
  using rows = Tensor<float, B<Y, X>, D<>>;
  auto same = [](int, rows r) { return r; };
  tpx::nn::run_pipeline<X, B>(some<rows>(), some<tpx::nn::pipeline_schedule>(), same, same);
#elif defined(CHECKPOINT_PARTIAL_SUM)
  tpx::io::checkpoint_writer out(rank, some<tpx::io::checkpoint_directory>(), 0);
  out.add("partial", some<Tensor<float, B<>, F<>, Unreduced<X>>>());
#endif
}

int main() {}
