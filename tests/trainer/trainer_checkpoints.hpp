// Shared by the tests of the example trainer's checkpoints (tests/trainer, tests/mpi): every
// tensor of a checkpoint, loaded onto a mesh of threads and gathered, as global arrays.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer_test_support.hpp"

namespace trainer_test {

// Every tensor of o.ckpt_dir's checkpoint of `step` as global arrays, loaded on a
// mesh_x x mesh_y mesh of threads.
inline std::map<std::string, std::vector<float>> load_global(const trainer::options& o, int mesh_x,
                                                             int mesh_y, std::int64_t step) {
  std::map<std::string, std::vector<float>> out;
  tpx::spmd(tpx::host, tpx::Mesh<trainer::X, trainer::Y>{mesh_x, mesh_y}, [&](auto& rank) {
    trainer::model_tensors p(rank, o.model), m(rank, o.model), v(rank, o.model);
    tpx::io::checkpoint_reader in(o.ckpt_dir, step);
    p.for_each(
        [&](const std::string& name, auto& pt, auto& mt, auto& vt) {
          in.load("param." + name, pt);
          in.load("adam.m." + name, mt);
          in.load("adam.v." + name, vt);
          auto gp = tpx::to_global(pt), gm = tpx::to_global(mt), gv = tpx::to_global(vt);
          if (rank.world_rank() == 0) {
            out["param." + name] = std::move(gp);
            out["adam.m." + name] = std::move(gm);
            out["adam.v." + name] = std::move(gv);
          }
        },
        m, v);
  });
  return out;
}

}  // namespace trainer_test
