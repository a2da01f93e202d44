// The GPT example's training loop of one host rank, fp32 and bf16, compiled once each in
// host_rank_fp32.cpp and host_rank_bf16.cpp beside it and linked by tpx-gpt and the trainer
// tests, as the MLP's are (examples/trainer/host_ranks.hpp says why).
//
// The model's forward and backward passes (gpt::transformer's forward_backward in its three
// layouts, model.hpp) are compiled apart, a file per compute type (host_model_fp32.cpp,
// host_model_bf16.cpp), and declared here, so that neither the loops nor the tests that run the
// model on the host (tests/trainer/gpt_test_support.hpp) compile them again. Measured on this
// machine, g++ 12 at -O3 with ccache off, one file at a time: the two loops took 51 and 53 s
// before, 26 and 25 s now beside the models' 35 and 40 s; gpt_test.cpp 51 s before, 25 s now, and
// gpt_hsdp_test.cpp 46 s before, 18 s now (208 s before, 176 s now, with mpi_trainer_test.cpp's
// 7 s). A file per layout, both compute types, took 35 s each: the layouts of one compute type
// share most of what they instantiate (the layers, the collectives), so three such files cost
// more than two.
#pragma once

#include "../trainer/host_ranks.hpp"
#include "family.hpp"

extern template TPX_TRAINER_HOST_RANK(float, gpt::family);
extern template TPX_TRAINER_HOST_RANK(tpx::bf16, gpt::family);

TPX_GPT_LAYOUTS(extern template, float, tpx::host_space);
TPX_GPT_LAYOUTS(extern template, tpx::bf16, tpx::host_space);
