// Complex arrays for the transforms: an owning, SIMD-aligned buffer and a
// non-owning 2-D view (rows x cols, row stride), so kernels take views
// instead of raw pointers and sizes travel with the data.
#pragma once

#include <fftw3.h>

#include <algorithm>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

namespace iotest {

using cplx = std::complex<double>;
using index_t = std::int64_t;

// SIMD-aligned storage, zero-initialised unless asked otherwise. Buffers of
// 4 MiB and more are 2 MiB aligned, so that a node whose transparent huge
// pages are `always` backs them with huge pages. They are not advised into
// huge pages (MADV_HUGEPAGE) where the node leaves that to the program: on
// the development VM the advice made the producer's first touch of its
// prepared facets 2-5x slower (the kernel zeroing fresh huge pages) and no
// transform or tap sum faster (bench/README.md, "Predict with w against the
// 2019 code"). Untouched pages are not resident, so sizing for the worst
// case is cheap. Smaller buffers of a page or more start on a page, so that
// O_DIRECT writes them as they are (a writer's merged chunks).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Zeroed unless `zeroed` is false (for buffers the caller overwrites whole).
  explicit AlignedBuffer(index_t count, bool zeroed = true) : size_(count) {
    if (count <= 0) return;
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = sizeof(cplx) * static_cast<size_t>(count);
    if (bytes >= 2 * kHuge) {
      data_ = static_cast<cplx*>(std::aligned_alloc(kHuge, (bytes + kHuge - 1) / kHuge * kHuge));
    } else {
      const size_t align = bytes >= 4096 ? 4096 : 64;
      data_ = static_cast<cplx*>(std::aligned_alloc(align, (bytes + align - 1) / align * align));
    }
    if (!data_) throw std::bad_alloc();
    if (zeroed) zero();
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~AlignedBuffer() { std::free(data_); }

  cplx* data() { return data_; }
  const cplx* data() const { return data_; }
  index_t size() const { return size_; }
  void zero() {
    if (data_) std::memset(static_cast<void*>(data_), 0, sizeof(cplx) * static_cast<size_t>(size_));
  }

 private:
  cplx* data_ = nullptr;
  index_t size_ = 0;
};

// A view of rows x cols complex values, row-major with a row stride.
template <typename T>
struct View2D {
  T* data = nullptr;
  index_t rows = 0;
  index_t cols = 0;
  index_t stride = 0;  // elements between the starts of consecutive rows

  View2D() = default;
  View2D(T* d, index_t r, index_t c) : data(d), rows(r), cols(c), stride(c) {}
  View2D(T* d, index_t r, index_t c, index_t s) : data(d), rows(r), cols(c), stride(s) {}
  // A mutable view converts to a read-only one.
  operator View2D<const T>() const { return {data, rows, cols, stride}; }

  T& operator()(index_t r, index_t c) const { return data[r * stride + c]; }
  T* row(index_t r) const { return data + r * stride; }
};

using CView2D = View2D<const cplx>;
using MView2D = View2D<cplx>;

// Owning 2-D array: an AlignedBuffer with its shape.
class Array2D {
 public:
  Array2D() = default;
  Array2D(index_t rows, index_t cols, bool zeroed = true)
      : buf_(rows * cols, zeroed), rows_(rows), cols_(cols) {}
  MView2D view() { return {buf_.data(), rows_, cols_}; }
  CView2D view() const { return {buf_.data(), rows_, cols_}; }
  cplx& operator()(index_t r, index_t c) { return buf_.data()[r * cols_ + c]; }
  const cplx& operator()(index_t r, index_t c) const { return buf_.data()[r * cols_ + c]; }
  cplx* data() { return buf_.data(); }
  const cplx* data() const { return buf_.data(); }
  index_t rows() const { return rows_; }
  index_t cols() const { return cols_; }
  index_t size() const { return rows_ * cols_; }
  index_t bytes() const { return size() * static_cast<index_t>(sizeof(cplx)); }
  void zero() { buf_.zero(); }

 private:
  AlignedBuffer buf_;
  index_t rows_ = 0, cols_ = 0;
};

// `count` buffers of rows x cols, zeroed row by row on `threads` threads
// now: the first touch of GiBs is seconds of page faults on a VM (46 % of
// a cold 8k-8k-256 predict), which belong to setup, not to the timed work
// that then uses them (issue 13).
inline std::vector<Array2D> touched_buffers(index_t count, index_t rows, index_t cols,
                                            int threads) {
  std::vector<Array2D> buffers;
  buffers.reserve(static_cast<size_t>(std::max<index_t>(0, count)));
  for (index_t i = 0; i < count; ++i) buffers.emplace_back(rows, cols, false);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (index_t k = 0; k < count * rows; ++k) {
    cplx* row = buffers[static_cast<size_t>(k / rows)].data() + (k % rows) * cols;
    std::fill(row, row + cols, cplx{});
  }
  return buffers;
}

}  // namespace iotest
