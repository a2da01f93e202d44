# tpx_trainer_cuda_ranks: the CUDA trainers' training loop of one rank, per model family and
# compute type, each compiled once in a file of its own (trainer/cuda_ranks.hpp says why) and
# linked by tpx-train-cuda, tpx-gpt-cuda and cuda_trainer_test. Included by examples/ and
# tests/cuda/, whichever of them is built; the first defines it.
if(NOT TARGET tpx_trainer_cuda_ranks)
  add_library(tpx_trainer_cuda_ranks OBJECT
    ${CMAKE_CURRENT_LIST_DIR}/trainer/cuda_rank_fp32.cu
    ${CMAKE_CURRENT_LIST_DIR}/trainer/cuda_rank_bf16.cu
    ${CMAKE_CURRENT_LIST_DIR}/gpt/cuda_rank_fp32.cu
    ${CMAKE_CURRENT_LIST_DIR}/gpt/cuda_rank_bf16.cu)
  target_link_libraries(tpx_trainer_cuda_ranks PUBLIC tpx::cuda tpx::io)
  tpx_target_warnings(tpx_trainer_cuda_ranks)
endif()
