// grid_walk: the (row, column) of a grid-stride loop's elements over a rows x cols grid, found
// without dividing per element.
//
// A GPU grid-stride loop visits the flat indices i, i + stride, i + 2 stride, ... of a row-major
// grid. Dividing each by cols costs a 64-bit division and remainder, tens of instructions, per
// element: more than a memory-bound kernel's work on it (the cross-entropy gradient's [rows, V]
// pass, a permute's copy). grid_walk divides once, at the thread's first index, and once for the
// stride; each step after that adds stride's row and column parts and carries one column overflow.
//
//   for (grid_walk walk(first, stride, cols); walk.flat < n; walk.advance())
//     fn(walk.row, walk.column);
//
// cols must be positive (the loops return before launching for an empty grid).
#pragma once

#include <cstdint>

#include "tpx/core/config.hpp"

namespace tpx::kernels {

struct grid_walk {
  std::int64_t flat, row, column;  // the flat index, and its row and column

  TPX_HOST_DEVICE grid_walk(std::int64_t first, std::int64_t stride, std::int64_t cols)
      : flat(first),
        row(first / cols),
        column(first % cols),
        stride_(stride),
        stride_rows_(stride / cols),
        stride_columns_(stride % cols),
        cols_(cols) {}

  // To flat + stride: column + stride's columns is under 2 cols, so one carry at most.
  TPX_HOST_DEVICE void advance() {
    flat += stride_;
    row += stride_rows_;
    column += stride_columns_;
    if (column >= cols_) {
      column -= cols_;
      ++row;
    }
  }

 private:
  std::int64_t stride_, stride_rows_, stride_columns_, cols_;
};

}  // namespace tpx::kernels
