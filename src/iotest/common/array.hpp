// Complex arrays for the transforms: an owning, SIMD-aligned buffer and a
// non-owning 2-D view (rows x cols, row stride), so kernels take views
// instead of raw pointers and sizes travel with the data.
#pragma once

#include <fftw3.h>
#include <sys/mman.h>

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

// SIMD-aligned storage, zero-initialised unless asked otherwise.
//
// Buffers of 4 MiB and more are their own anonymous mappings, 2 MiB
// aligned, so that a node whose transparent huge pages are `always` backs
// them with huge pages. A fresh mapping reads as zero, so zeroing one is
// making it resident: one MADV_POPULATE_WRITE call (Linux 5.14) instead
// of a page fault per 4 KiB. On the development VM, 4.5 GiB (a producer's
// prepared facets) took 1.4-3.4 s so against 2.6-4.7 s written, and the
// with-w run's system time fell by a quarter (bench/README.md, "Predict
// with w against the 2019 code"). Where the kernel refuses the call, the
// pages are written as before. They are not
// advised into huge pages (MADV_HUGEPAGE) where the node leaves that to
// the program: on that VM the advice made first touch 2-5x slower (the
// kernel compacting and zeroing huge pages) and no kernel faster.
//
// Smaller buffers of a page or more start on a page, so that O_DIRECT
// writes them as they are (a writer's merged chunks).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Zeroed unless `zeroed` is false (for buffers the caller overwrites whole).
  explicit AlignedBuffer(index_t count, bool zeroed = true) : size_(count) {
    if (count <= 0) return;
    if (mapped()) {
      data_ = static_cast<cplx*>(map_fresh(mapped_bytes()));
      if (zeroed) make_resident(0, size_);
      return;
    }
    const size_t align = bytes() >= 4096 ? 4096 : 64;
    data_ = static_cast<cplx*>(std::aligned_alloc(align, (bytes() + align - 1) / align * align));
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
  ~AlignedBuffer() {
    if (data_ && mapped()) munmap(data_, mapped_bytes());
    else std::free(data_);
  }

  cplx* data() { return data_; }
  const cplx* data() const { return data_; }
  index_t size() const { return size_; }
  void zero() {
    if (data_) std::memset(static_cast<void*>(data_), 0, bytes());
  }
  // Makes elements [first, first + count) of a buffer not yet written
  // resident (and zero): populated by the kernel where the buffer is a
  // fresh mapping and the kernel allows it, else written with zeros.
  void make_resident(index_t first, index_t count) {
    cplx* from = data_ + first;
#ifdef MADV_POPULATE_WRITE
    if (mapped()) {
      // madvise wants a page-aligned start; the page before `from` is this
      // buffer's own, and populating a resident page changes nothing.
      const auto page = reinterpret_cast<uintptr_t>(from) & ~uintptr_t{4095};
      const size_t span = reinterpret_cast<uintptr_t>(from + count) - page;
      if (madvise(reinterpret_cast<void*>(page), span, MADV_POPULATE_WRITE) == 0) return;
    }
#endif
    std::fill(from, from + count, cplx{});
  }

 private:
  static constexpr size_t kHugePage = size_t{2} << 20;
  size_t bytes() const { return sizeof(cplx) * static_cast<size_t>(size_); }
  bool mapped() const { return bytes() >= 2 * kHugePage; }
  size_t mapped_bytes() const { return (bytes() + kHugePage - 1) / kHugePage * kHugePage; }
  // A fresh anonymous mapping of `length` bytes (a multiple of 2 MiB)
  // starting on a 2 MiB boundary: mapped 2 MiB longer, then trimmed.
  static void* map_fresh(size_t length) {
    const size_t span = length + kHugePage;
    void* at = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (at == MAP_FAILED) throw std::bad_alloc();
    const auto base = reinterpret_cast<uintptr_t>(at);
    const uintptr_t start = (base + kHugePage - 1) & ~(kHugePage - 1);
    if (start > base) munmap(at, start - base);
    if (base + span > start + length)
      munmap(reinterpret_cast<void*>(start + length), base + span - (start + length));
    return reinterpret_cast<void*>(start);
  }

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
  void make_resident(index_t first, index_t count) { buf_.make_resident(first, count); }

 private:
  AlignedBuffer buf_;
  index_t rows_ = 0, cols_ = 0;
};

// `count` buffers of rows x cols, made resident (and zero) row by row on
// `threads` threads now: the first touch of GiBs is seconds of page faults
// on a VM (46 % of a cold 8k-8k-256 predict), which belong to setup, not
// to the timed work that then uses them (issue 13).
inline std::vector<Array2D> touched_buffers(index_t count, index_t rows, index_t cols,
                                            int threads) {
  std::vector<Array2D> buffers;
  buffers.reserve(static_cast<size_t>(std::max<index_t>(0, count)));
  for (index_t i = 0; i < count; ++i) buffers.emplace_back(rows, cols, false);
  // Dealt out in blocks of rows as threads come free: on a VM the cost of
  // a fresh page varies by region (whether the host still backs it), and
  // halves dealt out in advance finished 2 s apart.
#pragma omp parallel for schedule(dynamic, 64) num_threads(threads)
  for (index_t k = 0; k < count * rows; ++k)
    buffers[static_cast<size_t>(k / rows)].make_resident((k % rows) * cols, cols);
  return buffers;
}

}  // namespace iotest
