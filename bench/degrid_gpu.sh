#!/usr/bin/env bash
# Accelerated degridding (issues 29, 38): `iotest degrid --device=cuda` on
# one GPU against the same machine's CPU cores running the CPU path, in the
# same script: small + lowbd2 with w (dec -30), the sky's visibilities
# checked against the direct transform in both. Prints each rate
# (visibilities over the predict chain's time, degrid_s), the GPU kernels'
# own rate (visibilities over kernel_s), the GPU's time split (kernels,
# copies, host waits), the tap sums' share of the GPU's FP64 peak, and
# ends with ratio=<GPU vis/s / CPU vis/s>.
# The CPU runs the same observation with an eighth of the channels (CPU_FREQ:
# the same band, so the same uv coverage and taps per visibility, 1.1e9
# visibilities): the whole one takes the CPU path over 7 minutes on 16 cores
# (2.1e7 vis/s). Both rates are per visibility.
#
# Needs a build with the CUDA path (`make build` where nvcc is found, or
# `cmake --preset cuda`; IOTEST= names another binary) and a GPU: without
# them iotest refuses --device=cuda with the reason, and so does this.
# Usage: bench/degrid_gpu.sh   (TIME, FREQ: the observation, CPU_FREQ the
#        CPU's channels; THREADS: the CPU run's, default all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bin=${IOTEST:-build/bin/iotest}
dir=${DIR:-bench/out/degrid_gpu}
mkdir -p "$dir"
job=(--rec-set=small --vis-set=lowbd2 --time="${TIME:--460:460/64/64}" --dec=-30
     --vis-samples=2000)
"$bin" degrid "${job[@]}" --freq="${FREQ:-260e6:300e6/1024/64}" --device=cuda \
  --report="$dir/cuda.json" | tail -n 12
"$bin" degrid "${job[@]}" --freq="${CPU_FREQ:-260e6:300e6/128/64}" --device=cpu \
  ${THREADS:+--threads=$THREADS} --report="$dir/cpu.json" | tail -n 12
python3 - "$dir/cuda.json" "$dir/cpu.json" <<'PY'
import json, sys
gpu, cpu = (json.load(open(p)) for p in sys.argv[1:3])
vis = gpu["counts"]["visibilities"]
g, c = gpu["rates"]["vis_per_s"], cpu["rates"]["vis_per_s"]
d = gpu["device"]
card = d["gpus"][0]
print(f"GPU {card['name']} ({card['driver']}): {g:.3g} vis/s, RMSE {gpu['accuracy']['vis_rmse']:.2e}")
print(f"CPU {cpu['config']['threads']} threads: {c:.3g} vis/s, "
      f"RMSE {cpu['accuracy']['vis_rmse']:.2e}")
print(f"GPU time: kernels {d['kernel_s']:.3f} s, copies {d['transfer_s']:.3f} s, host waits "
      f"{d['host_wait_s']:.3f} s, predict chain {gpu['timing']['degrid_s']:.3f} s")
print(f"GPU kernels alone (towers, FFTs, tap sums): {vis / d['kernel_s']:.3g} vis/s")
# The tap sums: S x S x Sw taps a visibility, a complex value times a real
# weight each (two FMAs, 4 flops), the largest part of the kernel's work.
cfg = gpu["config"]
flops = 4 * cfg["support"] ** 2 * cfg["w_support"] * vis
peak = card["fp64_flops_per_s"]
if peak > 0 and d["kernel_s"] > 0:
    share = flops / d["kernel_s"] / peak
    print(f"tap sums {flops / d['kernel_s'] / 1e12:.2f} TFLOP/s in the kernels: {share:.1%} of the "
          f"FP64 peak {peak / 1e12:.1f} TFLOP/s")
print(f"ratio={g / c:.1f}")
PY
