#!/usr/bin/env bash
# Builds the test fixtures (TorchScript models, saved inputs/outputs, the typed
# fixtures with their 100-call reference streams (values.py), the
# digits data and the INT8 references, and the custom-operator library of the
# custom_op fixture, built with g++), and Silero VAD v4/v5 from third_party with
# their speech stream (silero.py), into OUT_DIR (default build/fixtures).
# Reruns skip fixtures whose generator is unchanged (stamps in OUT_DIR/.stamps).
#
# Environment: FIXTURES_SKIP_LARGE=1 (no resnet50), FIXTURES_FORCE=1 (rebuild
# all), FIXTURES_ONLY=a,b, FIXTURES_THREADS (default 1), FIXTURES_QENGINE
# (default onednn), PYTHON (default /usr/bin/python3).
set -euo pipefail

out="${1:-build/fixtures}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Debian's interpreter: the python3 first on PATH may be another one without torch.
py="${PYTHON:-/usr/bin/python3}"

if ! "$py" -c 'import torch, torchvision, sklearn, numpy' 2>/dev/null; then
	echo "make-fixtures: $py cannot import torch, torchvision, sklearn and numpy;" >&2
	echo "  install them with: apt-get install python3-torch python3-torchvision python3-sklearn python3-numpy" >&2
	exit 1
fi

mkdir -p "$out"
start=$(date +%s)
# Quiet the tracer's and the deprecation warnings; real errors still stop the run.
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore}"
# Set iteration order reaches the saved TorchScript code; a fixed hash seed
# makes reruns byte-identical.
export PYTHONHASHSEED=0
"$py" "$here/fixtures/generate.py" "$out"
"$py" "$here/fixtures/quantize_reference.py" "$out"
"$py" "$here/fixtures/values.py" "$out"
"$py" "$here/fixtures/silero.py" "$out"
echo "make-fixtures: $out ready in $(( $(date +%s) - start ))s" >&2
