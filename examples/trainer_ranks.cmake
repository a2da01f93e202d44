# tpx_trainer_ranks(TARGET KIND EXTENSION LIBRARY...): the object library of the trainers'
# training loop of one rank, compiled once per model family and compute type, each in a file of
# its own (trainer/host_ranks.hpp and trainer/cuda_ranks.hpp say why): KIND_rank_fp32.EXTENSION
# and KIND_rank_bf16.EXTENSION in trainer/ and gpt/. Kinds: host (cpp, tpx::tpx; linked by
# tpx-train, tpx-gpt and the trainer tests) and cuda (cu, tpx::cuda; tpx-train-cuda, tpx-gpt-cuda
# and cuda_trainer_test). Called by examples/ and tests/, whichever of them is built; the first
# call defines the library.
include_guard(GLOBAL)

function(tpx_trainer_ranks target kind extension)
  if(TARGET ${target})
    return()
  endif()
  set(dir ${CMAKE_CURRENT_FUNCTION_LIST_DIR})
  add_library(${target} OBJECT
    ${dir}/trainer/${kind}_rank_fp32.${extension} ${dir}/trainer/${kind}_rank_bf16.${extension}
    ${dir}/gpt/${kind}_rank_fp32.${extension} ${dir}/gpt/${kind}_rank_bf16.${extension})
  target_link_libraries(${target} PUBLIC ${ARGN} tpx::io)
  tpx_target_warnings(${target})
endfunction()
