// How a dim of global extent n is cut into shards: the run-time half of a sharding.
//
// A dim split over one axis of size s gives rank c (its coordinate on that axis) the c-th of s
// contiguous blocks. Extents that do not divide evenly are supported: the first n % s blocks get
// one extra element, so blocks differ in size by at most one (and may be empty when n < s).
// A dim split over several axes, B<X, Y>, is split over X first and then each block over Y:
// that nesting is what makes all_gather<Y> of B_XY give exactly B_X, and reduce_scatter<Y, B>
// of B_X give exactly B_XY.
#pragma once

#include <cstdint>

namespace tpx {

struct block {
  std::int64_t offset = 0;  // first global index of the block
  std::int64_t size = 0;
};

constexpr block split_block(std::int64_t extent, int parts, int index) {
  const std::int64_t base = extent / parts;
  const std::int64_t extra = extent % parts;
  const std::int64_t i = index;
  return {i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

// The block of a parent block [outer.offset, outer.offset + outer.size) at index of parts.
constexpr block split_block(block outer, int parts, int index) {
  const block inner = split_block(outer.size, parts, index);
  return {outer.offset + inner.offset, inner.size};
}

}  // namespace tpx
