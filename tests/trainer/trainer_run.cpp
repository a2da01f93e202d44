// The trainers' instantiations on the thread backend that the trainer tests link (object library
// tpx_trainer_run), compiled here once instead of in every test that runs them: tpx-train's
// (declared extern in trainer_test_support.hpp) and tpx-gpt's (gpt_test_support.hpp).
#include "gpt_test_support.hpp"
#include "trainer_test_support.hpp"

template TPX_TRAINER_RUN(trainer::mlp, tpx::host_backend);
template TPX_TRAINER_RUN(gpt::family, tpx::host_backend);
