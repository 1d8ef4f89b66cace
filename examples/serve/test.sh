#!/usr/bin/env bash
# make test-example: install torchspeed into a temp prefix, build the example service against
# that install only (pkg-config, no path into this clone), serve the digits fixture on
# 127.0.0.1 and check it answers with the same top-1 as `torchspeed run`, then stop it with
# SIGTERM and check it shuts down cleanly.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
fixtures=${TORCHSPEED_FIXTURES:-$root/build/fixtures}
model=$fixtures/digits.pt
input=$fixtures/digits_in_x.npy
if [ ! -f "$model" ] || [ ! -f "$input" ]; then
  echo "test-example: $model or $input missing: run make fixtures" >&2
  exit 1
fi

tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
prefix=$tmp/prefix

make --no-print-directory install PREFIX="$prefix" >/dev/null
for f in lib/libtorchspeed.so lib/libtorchspeed_ops.so include/torchspeed.h lib/pkgconfig/torchspeed.pc bin/torchspeed; do
  [ -e "$prefix/$f" ] || { echo "test-example: make install did not install $f" >&2; exit 1; }
done

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# The go command does not key its cache on pkg-config's answer (see the Makefile's install).
export CGO_CFLAGS="-O2 -g -I$prefix/include"
unset CGO_LDFLAGS
go build -tags torchspeed_pkgconfig -o "$tmp/serve" ./examples/serve

# Nothing the example or the installed binary loads may come from the clone.
for bin in "$tmp/serve" "$prefix/bin/torchspeed"; do
  if readelf -d "$bin" | grep -E 'RPATH|RUNPATH' | grep -q "$root"; then
    echo "test-example: $bin has an rpath into the clone:" >&2; readelf -d "$bin" | grep -E 'RPATH|RUNPATH' >&2; exit 1
  fi
  lib=$(ldd "$bin" | awk '/libtorchspeed.so/ {print $3}')
  [ "$(readlink -f "$lib")" = "$(readlink -f "$prefix/lib/libtorchspeed.so")" ] || {
    echo "test-example: $bin loads libtorchspeed.so from '$lib', not from $prefix/lib" >&2; exit 1; }
done

want=$("$prefix/bin/torchspeed" run -m "$model" --input "$input" --topk 1 --json 2>/dev/null | jq '.outputs[0].topk[0].index')

: >"$tmp/out"   # exists before the server opens it, for the polling below
"$tmp/serve" -model "$model" -addr 127.0.0.1:0 -threads 1 >"$tmp/out" 2>"$tmp/err" &
pid=$!
addr=
for _ in $(seq 1 300); do
  addr=$(sed -n 's/^listening on //p' "$tmp/out" || true)
  [ -n "$addr" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "test-example: serve exited:" >&2; cat "$tmp/err" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { echo "test-example: serve did not start in 30 s" >&2; cat "$tmp/err" >&2; exit 1; }

body=$(/usr/bin/python3 -c '
import json, sys, numpy as np
a = np.load(sys.argv[1])
print(json.dumps({"inputs": [{"shape": list(a.shape), "dtype": str(a.dtype), "data": a.ravel().tolist()}]}))' "$input")
got=$(curl -sS --fail-with-body -X POST -H 'Content-Type: application/json' --data-binary "$body" "http://$addr/v1/predict" | jq '.outputs[0].top1[0]')
bad=$(curl -sS -o /dev/null -w '%{http_code}' -X POST --data-binary '{"inputs":[{"shape":[1,1,8,8],"data":[1,2]}]}' "http://$addr/v1/predict")

kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
pid=
[ "$rc" = 0 ] || { echo "test-example: serve exited $rc on SIGTERM, want 0:" >&2; cat "$tmp/err" >&2; exit 1; }
[ "$bad" = 400 ] || { echo "test-example: a request with 2 values for 64 elements got HTTP $bad, want 400" >&2; exit 1; }
# Both answers must be class indices: two missing fields (jq's null) are not agreement.
[[ "$want" =~ ^[0-9]+$ ]] || { echo "test-example: torchspeed run gave no top-1 index ('$want')" >&2; exit 1; }
[[ "$got" =~ ^[0-9]+$ ]] || { echo "test-example: serve gave no top-1 index ('$got')" >&2; exit 1; }
[ "$got" = "$want" ] || { echo "test-example: serve answered top-1 $got, torchspeed run $want" >&2; exit 1; }
echo "test-example: ok (top-1 $got from $addr, built against $prefix only)"
