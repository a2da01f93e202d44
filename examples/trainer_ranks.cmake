# tpx_trainer_ranks(DIR): the object library tpx_DIR_ranks of a host trainer's training loop of one
# rank (thread and MPI launchers alike), fp32 and bf16, each compiled once in a file of its own:
# DIR/host_rank_fp32.cpp and DIR/host_rank_bf16.cpp (trainer/host_ranks.hpp says why), and the GPT's
# model apart from its loops, gpt/host_model_fp32.cpp and host_model_bf16.cpp (gpt/host_ranks.hpp
# says why). tpx_trainer_ranks (DIR trainer, the MLP) is linked by tpx-train, tpx_gpt_ranks by
# tpx-gpt, and both by the trainer tests. tpx_trainer_device_ranks(DIR) is the same for the CUDA
# trainers: the object library tpx_DIR_device_ranks of DIR/device_ranks.cu, both compute types in
# one file (trainer/device_ranks.hpp says why; the GPT's model in gpt/device_model.cu beside it,
# the pipelined MLP's loops in trainer/device_ranks_pipelined.cu),
# linked by tpx-train-cuda or tpx-gpt-cuda and cuda_trainer_test. tpx_trainer_command_line(DIR) is
# the object library tpx_DIR_command_line of DIR/command_line.cpp, the family's command line (CLI11;
# trainer/command_line.hpp says why), linked by both programs of the family, host and CUDA;
# tpx_trainer_dry_run(DIR) likewise is tpx_DIR_dry_run, DIR/dry_run.cpp, the family's --dry-run
# (trainer/dry_run.hpp); tpx_gpt_generate is gpt/generate.cpp, tpx-gpt's --generate, linked by both
# GPT programs and the generation test. Called by examples/ and tests/, whichever of them is built; the first call
# defines the library.
include_guard(GLOBAL)

# The object library TARGET of SOURCES (relative to this folder), linked to LIBRARIES, once.
function(_tpx_example_objects target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;LIBRARIES")
  if(TARGET ${target})
    return()
  endif()
  list(TRANSFORM arg_SOURCES PREPEND ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/)
  add_library(${target} OBJECT ${arg_SOURCES})
  target_link_libraries(${target} PUBLIC ${arg_LIBRARIES})
  tpx_target_warnings(${target})
endfunction()

function(tpx_trainer_ranks dir)
  # Beside the GPT's loops, its model, a file per compute type (gpt/host_ranks.hpp says why);
  # beside the MLP's, the loops of the MLP cut into pipeline stages (tpx-train --pipeline).
  set(gpt_models gpt/host_model_fp32.cpp gpt/host_model_bf16.cpp)
  set(trainer_models trainer/host_rank_pipelined_fp32.cpp trainer/host_rank_pipelined_bf16.cpp)
  _tpx_example_objects(tpx_${dir}_ranks
                       SOURCES ${dir}/host_rank_fp32.cpp ${dir}/host_rank_bf16.cpp ${${dir}_models}
                       LIBRARIES tpx::tpx tpx::io)
endfunction()

function(tpx_trainer_device_ranks dir)
  # Beside the GPT's loops, its model, both compute types in one file (gpt/device_ranks.hpp);
  # beside the MLP's, the pipelined MLP's loops (tpx-train-cuda --pipeline).
  set(gpt_models gpt/device_model.cu)
  set(trainer_models trainer/device_ranks_pipelined.cu)
  _tpx_example_objects(tpx_${dir}_device_ranks SOURCES ${dir}/device_ranks.cu ${${dir}_models}
                       LIBRARIES tpx::cuda tpx::io)
endfunction()

function(tpx_trainer_command_line dir)
  _tpx_example_objects(tpx_${dir}_command_line SOURCES ${dir}/command_line.cpp
                       LIBRARIES tpx::io CLI11::CLI11)
endfunction()

function(tpx_trainer_dry_run dir)
  # Beside the GPT's dry run, its model on meta tensors (gpt/dry_run_model.hpp says why).
  set(gpt_models gpt/dry_run_model.cpp)
  _tpx_example_objects(tpx_${dir}_dry_run SOURCES ${dir}/dry_run.cpp ${${dir}_models}
                       LIBRARIES tpx::io)
endfunction()

function(tpx_gpt_generate)
  _tpx_example_objects(tpx_gpt_generate SOURCES gpt/generate.cpp LIBRARIES tpx::tpx tpx::io)
endfunction()
