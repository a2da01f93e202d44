// any_communicator: a communicator behind a virtual interface, so that a Tensor can reach the
// communicator of its mesh axes without its type naming the backend.
//
// Backends implement the Communicator concept (communicator.hpp) as plain classes;
// communicator_model<C> wraps one. A virtual call per collective costs nothing next to moving a
// tensor, and it keeps Tensor<float, B<X>, D<Y>> one type whatever transport carries it. The
// wrapper also keeps, for every backend alike, the time the rank spends in the collectives and
// what they moved (comm/collective_traffic.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <utility>

#include "tpx/comm/collective_traffic.hpp"
#include "tpx/comm/communicator.hpp"
#include "tpx/core/bfloat16.hpp"

namespace tpx {

namespace detail {
template <class T>
class collectives_of {
 public:
  virtual void all_gather(std::span<const T> in, std::span<T> out,
                          std::span<const std::size_t> counts) = 0;
  virtual void reduce_scatter(std::span<const T> in, std::span<T> out,
                              std::span<const std::size_t> counts) = 0;
  // op defaults to sum here and, identically, on the override in collectives_model (default
  // arguments of virtual functions bind to the static type, so the two must agree).
  virtual void all_reduce(std::span<const T> in, std::span<T> out,
                          reduction op = reduction::sum) = 0;
  virtual void all_to_all(std::span<const T> in, std::span<T> out,
                          std::span<const std::size_t> counts) = 0;
  virtual void broadcast(std::span<const T> in, std::span<T> out, int root) = 0;

 protected:
  ~collectives_of() = default;
};
}  // namespace detail

class any_communicator : public detail::collectives_of<float>,
                         public detail::collectives_of<bf16> {
 public:
  virtual ~any_communicator() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void barrier() = 0;

  // Wall time this rank has spent inside this communicator's collectives (waiting included):
  // the trainers report it as the share of a step spent communicating.
  double collective_seconds() const { return seconds_; }
  // What this rank's collectives on this communicator have moved.
  const collective_traffic& traffic() const { return traffic_; }

  using detail::collectives_of<float>::all_gather;
  using detail::collectives_of<bf16>::all_gather;
  using detail::collectives_of<float>::reduce_scatter;
  using detail::collectives_of<bf16>::reduce_scatter;
  using detail::collectives_of<float>::all_reduce;
  using detail::collectives_of<bf16>::all_reduce;
  using detail::collectives_of<float>::all_to_all;
  using detail::collectives_of<bf16>::all_to_all;
  using detail::collectives_of<float>::broadcast;
  using detail::collectives_of<bf16>::broadcast;

 protected:
  // Adds the time from construction to destruction to collective_seconds().
  class timed {
   public:
    explicit timed(any_communicator& c) : c_(c), start_(std::chrono::steady_clock::now()) {}
    ~timed() {
      c_.seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
    timed(const timed&) = delete;
    timed& operator=(const timed&) = delete;

   private:
    any_communicator& c_;
    std::chrono::steady_clock::time_point start_;
  };
  // Counts one call of `op` over `data_bytes` of data on this group.
  void count(detail::CollectiveOp op, double data_bytes) { traffic_.add(op, size(), data_bytes); }

 private:
  double seconds_ = 0;
  collective_traffic traffic_;
};

namespace detail {
template <class C, class T, class Base>
class collectives_model : public Base {
 public:
  using Base::Base;
  using Base::all_gather;
  using Base::all_reduce;
  using Base::all_to_all;
  using Base::broadcast;
  using Base::reduce_scatter;
  void all_gather(std::span<const T> in, std::span<T> out,
                  std::span<const std::size_t> counts) override {
    this->count(detail::CollectiveOp::all_gather, bytes(out));
    const typename Base::timed clock(*this);
    this->impl().all_gather(in, out, counts);
  }
  void reduce_scatter(std::span<const T> in, std::span<T> out,
                      std::span<const std::size_t> counts) override {
    this->count(detail::CollectiveOp::reduce_scatter, bytes(in));
    const typename Base::timed clock(*this);
    this->impl().reduce_scatter(in, out, counts);
  }
  void all_reduce(std::span<const T> in, std::span<T> out, reduction op = reduction::sum) override {
    this->count(detail::CollectiveOp::all_reduce, bytes(in));
    const typename Base::timed clock(*this);
    this->impl().all_reduce(in, out, op);
  }
  void all_to_all(std::span<const T> in, std::span<T> out,
                  std::span<const std::size_t> counts) override {
    this->count(detail::CollectiveOp::all_to_all, bytes(in));
    const typename Base::timed clock(*this);
    this->impl().all_to_all(in, out, counts);
  }
  void broadcast(std::span<const T> in, std::span<T> out, int root) override {
    this->count(detail::CollectiveOp::broadcast, bytes(out));
    const typename Base::timed clock(*this);
    this->impl().broadcast(in, out, root);
  }

 private:
  template <class U>
  static double bytes(std::span<U> s) {
    return static_cast<double>(s.size_bytes());
  }
};

template <class C>
class communicator_holder : public any_communicator {
 public:
  explicit communicator_holder(C comm) : comm_(std::move(comm)) {}
  int size() const override { return static_cast<int>(comm_.size()); }
  int rank() const override { return static_cast<int>(comm_.rank()); }
  void barrier() override {
    count(CollectiveOp::barrier, 0);
    const timed clock(*this);
    comm_.barrier();
  }
  C& impl() { return comm_; }

 private:
  C comm_;
};
}  // namespace detail

// Owns a C and serves it as an any_communicator.
template <class C>
  requires CommunicatorFor<C, float> && CommunicatorFor<C, bf16>
class communicator_model final
    : public detail::collectives_model<
          C, float, detail::collectives_model<C, bf16, detail::communicator_holder<C>>> {
 public:
  explicit communicator_model(C comm)
      : detail::collectives_model<
            C, float, detail::collectives_model<C, bf16, detail::communicator_holder<C>>>(
            std::move(comm)) {}
};

}  // namespace tpx
