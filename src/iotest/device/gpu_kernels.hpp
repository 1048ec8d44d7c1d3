// The CUDA kernels of GpuDegridder (gpu_degridder.cu) and their launchers,
// callable from plain C++ (gpu_degridder.cpp): only the launches need nvcc.
// CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>

#include "iotest/device/tap_math.hpp"

namespace iotest::device::gpu {

using tap::Cplx;

// A subgrid of a batch: its offsets, and its tower's planes (the first
// plane's index w / dw, their count, and where they start among the
// batch's planes).
struct Slot {
  double off0, off1;
  long long first_plane, plane_count;
  long long tower;  // the batch's plane index of its tower's first plane
};

// A batch on the device: its runs (in output order), subgrids, towers and
// visibilities. `error` is set to 1 by a visibility whose taps reach
// outside its tower (the host then throws, as check_taps does).
struct Batch {
  const tap::Run* runs = nullptr;
  int run_count = 0;
  const Slot* slots = nullptr;
  int slot_count = 0;
  long long visibilities = 0;
  long long groups = 0;   // channel groups (tap::kGroupChannels channels at most) of its runs
  Cplx* tower = nullptr;  // every slot's planes, xA x xA each
  int* error = nullptr;
};

// Predict: tower[p] = sums[slot] * step^power for every plane p of the
// batch (plane_slot, plane_power per plane) into `fft` (xM x xM per plane).
void launch_screens(const Cplx* sums, const Cplx* step, const int* plane_slot,
                    const long long* plane_power, long long planes, int xM, Cplx* fft,
                    cudaStream_t s);
// finish_subgrid_in's gather after its FFT: the xA x xA centred corner.
void launch_gather(const Cplx* fft, long long planes, int xM, int xA, Cplx* tower, cudaStream_t s);
// vis[i] for i in [0, b.visibilities): one thread per channel group of
// the batch's runs (b.groups of them, numbered by Run::group) where the
// support has a compiled kernel, else one per visibility.
void launch_degrid(const tap::Tables& t, const Batch& b, Cplx* vis, cudaStream_t s);

// Imaging: spreads vis onto the (zeroed) towers with atomic adds, one
// thread per channel group (one atomic pair a cell for the group's
// channels that share their cells) where the support has a compiled
// kernel, else one per visibility.
void launch_grid(const tap::Tables& t, const Batch& b, const Cplx* vis, cudaStream_t s);
// prepare_subgrid's scatter before its FFT: the tower planes into zeroed
// xM x xM planes.
void launch_place(const Cplx* tower, long long planes, int xM, int xA, Cplx* fft, cudaStream_t s);
// collapse_tower after the FFTs: per slot sum_p conj(step)^(first + p) X_p
// into sums[slot] (overwritten).
void launch_collapse(const Cplx* fft, const Slot* slots, int slot_count, const Cplx* step, int xM,
                     Cplx* sums, cudaStream_t s);

}  // namespace iotest::device::gpu
