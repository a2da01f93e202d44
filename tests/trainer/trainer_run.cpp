// The trainers' instantiations on the thread backend that the trainer tests link (object library
// tpx_trainer_run), compiled here once instead of in every test that runs them: tpx-train's
// (declared extern in trainer_test_support.hpp) and tpx-gpt's (gpt_test_support.hpp).
#include "gpt_test_support.hpp"
#include "trainer_test_support.hpp"

template void trainer::run<trainer::mlp, tpx::host_backend>(
    const trainer::options&, const std::function<void(const trainer::step_report&)>&,
    tpx::host_backend, const std::function<void()>&);

template void trainer::run<gpt::family, tpx::host_backend>(
    const trainer::run_options<gpt::family>&,
    const std::function<void(const trainer::step_report&)>&, tpx::host_backend,
    const std::function<void()>&);
