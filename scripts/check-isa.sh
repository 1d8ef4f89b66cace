#!/usr/bin/env bash
# The instruction-set matrix (make check-isa, part of make test): a fleet's older CPUs take
# lower code paths than the CPU at hand, so each is forced here and the INT8 and kernel tests
# run on it, with the bounds each path's arithmetic gives; then the CLI runs on an emulated
# Haswell (QEMU user mode: AVX2 and FMA, no AVX-512, no VNNI), where any AVX-512 instruction is an
# illegal instruction (cmd/torchspeed's *Emulated* tests; skipped, saying why, without
# qemu-user or root).
#   ONEDNN_MAX_CPU_ISA  caps oneDNN (convolutions, INT8 layers) below the CPU's own ISA
#   ATEN_CPU_CAPABILITY picks ATen's vectorized kernels (default = scalar, avx2, avx512)
#   TORCHSPEED_MAX_ISA  caps torchspeed's own kernels (scalar, avx2, avx512: AVX-512F without
#                       AVX512_BF16, so the BF16 GEMM widens to float as on Skylake-SP)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
has() { grep -m1 -qw "$1" /proc/cpuinfo; }
start=$SECONDS
step() {
  local name=$1 env=$2; shift 2
  echo "check-isa: $name ($env)"
  # shellcheck disable=SC2086 # env holds NAME=value words
  env $env go test -count=1 -timeout 20m "$@"
}
# -skip 'Gaps': those tests measure the machine's interruptions, which no code path changes.
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
isa=none; for f in amx_tile avx512_vnni avx512f avx2; do if has "$f"; then isa=$f; break; fi; done
echo "check-isa: on ${cpu:-an unnamed CPU} (best ISA: $isa)"

int8='Quant|ConvAdd|INT8|QDQ|QAdd|Forward|Linear|Conv|Clamp|ReLU6|Fast'
step "AVX2 and FMA, no VNNI: Haswell to Zen 3" \
  "ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 TORCHSPEED_MAX_ISA=avx2" \
  -skip 'Gaps' ./bindings/torch ./pkg/quant ./pkg/torchspeed
step "AVX2 and FMA, no VNNI: the INT8 pipeline" \
  "ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 TORCHSPEED_MAX_ISA=avx2" \
  -run 'INT8|Quant|Fuse|FastQDQ|Precision' ./pkg/pipeline
if has avx512f && has avx512bw && has avx512vl && has avx512dq; then
  step "AVX-512 without VNNI or BF16: Skylake-SP" \
    "ONEDNN_MAX_CPU_ISA=AVX512_CORE ATEN_CPU_CAPABILITY=avx512 TORCHSPEED_MAX_ISA=avx512" \
    -run "$int8" ./bindings/torch
else
  echo "check-isa: AVX-512 without VNNI: skipped, this CPU has no AVX-512 to cap (the emulated and AVX2 steps cover the rest)"
fi
step "no vector kernels: ATen's default, torchspeed's scalar, oneDNN at SSE4.1" \
  "ONEDNN_MAX_CPU_ISA=SSE41 ATEN_CPU_CAPABILITY=default TORCHSPEED_MAX_ISA=scalar" \
  -run "$int8" ./bindings/torch
# pipefail: the step fails when go test does; grep only trims QEMU's notes from the log.
step "the CLI on an emulated Haswell (qemu-user)" "" -run 'Emulated' -v ./cmd/torchspeed 2>&1 |
  grep -E '^(--- |ok|FAIL|PASS)|isa_test.go|SKIP'
echo "check-isa: passed in $((SECONDS - start)) s"
