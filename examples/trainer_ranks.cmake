# tpx_trainer_ranks(DIR): the object library tpx_DIR_ranks of a host trainer's training loop of
# one rank (thread and MPI launchers alike), fp32 and bf16, each compiled once in a file of its
# own: DIR/host_rank_fp32.cpp and DIR/host_rank_bf16.cpp (trainer/host_ranks.hpp says why).
# tpx_trainer_ranks (DIR trainer, the MLP) is linked by tpx-train, tpx_gpt_ranks by tpx-gpt, and
# both by the trainer tests. Called by examples/ and tests/, whichever of them is built; the first
# call defines the library.
include_guard(GLOBAL)

function(tpx_trainer_ranks dir)
  set(target tpx_${dir}_ranks)
  if(TARGET ${target})
    return()
  endif()
  set(source_dir ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${dir})
  add_library(${target} OBJECT ${source_dir}/host_rank_fp32.cpp ${source_dir}/host_rank_bf16.cpp)
  target_link_libraries(${target} PUBLIC tpx::tpx tpx::io)
  tpx_target_warnings(${target})
endfunction()
