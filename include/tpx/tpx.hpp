// tpx: tensor parallelism and FSDP with the sharding of every tensor in its C++ type.
//
// The umbrella header: include it and declare your names,
//
//   TPX_MESH_AXES(X, Y);   TPX_DIMS(B, D, F);
//   tpx::spmd(tpx::host, tpx::Mesh<X, Y>{2, 2}, [](auto& rank) {
//     auto in = tpx::randn<float, B<X>, D<Y>>(rank, {B(8), D(16)}, 1);   // In[B_X, D_Y]
//     auto w  = tpx::randn<float, D<X>, F<Y>>(rank, {D(16), F(32)}, 2);  // W[D_X, F_Y]
//     auto t  = tpx::matmul(in, w);  // Tensor<float, B<X>, F<Y>>, collectives chosen statically
//   });
//
// Folders: core/ (compile-time tools), sharding/ (dims, axes, meshes, the algebra), tensor/,
// comm/ (communicators), spmd/ (ranks and the launcher), ops/ (collectives, reshard, matmul,
// einsum),
// kernels/ (per-element math shared with CUDA, host GEMM).
#pragma once

#include "tpx/core/bfloat16.hpp"
#include "tpx/ops/apply.hpp"
#include "tpx/ops/collectives.hpp"
#include "tpx/ops/einsum.hpp"
#include "tpx/ops/elementwise.hpp"
#include "tpx/ops/matmul.hpp"
#include "tpx/ops/permute.hpp"
#include "tpx/ops/rename.hpp"
#include "tpx/ops/reshard.hpp"
#include "tpx/ops/roll.hpp"
#include "tpx/ops/sum.hpp"
#include "tpx/sharding/dim.hpp"
#include "tpx/sharding/mesh.hpp"
#include "tpx/sharding/mesh_axis.hpp"
#include "tpx/sharding/steps.hpp"
#include "tpx/spmd/spmd.hpp"
#include "tpx/tensor/describe.hpp"
#include "tpx/tensor/factories.hpp"
#include "tpx/tensor/staging.hpp"
#include "tpx/tensor/tensor.hpp"
