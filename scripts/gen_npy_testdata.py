#!/usr/bin/python3
"""Write the golden .npy/.npz files that pkg/npy's tests read.

Run with Debian's interpreter (the python3 first on PATH may lack numpy):

    /usr/bin/python3 scripts/gen_npy_testdata.py pkg/npy/testdata

Every array holds values from a formula the Go test recomputes, so the test checks
both that the file parses and that each element lands where numpy put it. Files are
tiny on purpose: they are committed.
"""
import os
import sys
import zipfile

import numpy as np


def values(dtype, shape):
    """Element i of the flattened array: a formula that exercises sign and fractions."""
    n = int(np.prod(shape)) if len(shape) else 1
    i = np.arange(n)
    if dtype == "bool":
        v = (i % 3) == 0
    elif dtype in ("float32", "float64"):
        v = i * 0.5 - 3.25
    elif dtype == "uint8":
        v = (i * 37) % 256
    elif dtype == "int8":
        v = (i * 37) % 256 - 128
    else:
        v = (i * 1000003) % 65536 - 32768  # fits int16 and up
        if dtype == "int64":
            v = v * 1000000007  # exceeds 32 bits
    return np.asarray(v).astype(dtype).reshape(shape)


def main(out):
    os.makedirs(out, exist_ok=True)
    shape = (2, 3, 4)
    for dt in ["float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"]:
        a = values(dt, shape)
        np.save(os.path.join(out, f"{dt}_le.npy"), a)
        b = a.astype(a.dtype.newbyteorder(">"))
        np.save(os.path.join(out, f"{dt}_be.npy"), b)

    a = values("float32", shape)
    for ver in [(1, 0), (2, 0), (3, 0)]:
        with open(os.path.join(out, f"float32_v{ver[0]}.npy"), "wb") as f:
            np.lib.format.write_array(f, a, version=ver)

    np.save(os.path.join(out, "scalar_f8.npy"), values("float64", ()))
    np.save(os.path.join(out, "empty_0x3_f4.npy"), values("float32", (0, 3)))
    np.save(os.path.join(out, "vector_i8.npy"), values("int64", (5,)))
    np.save(os.path.join(out, "fortran_f4.npy"), np.asfortranarray(values("float32", (3, 4))))
    np.save(os.path.join(out, "float16.npy"), values("float32", (3,)).astype(np.float16))

    inputs = values("float32", (4, 1, 2, 2))
    tokens = values("int64", (4, 6))
    labels = np.arange(4, dtype=np.int64) % 3
    np.savez(os.path.join(out, "stored.npz"), input=inputs, tokens=tokens, labels=labels)
    np.savez_compressed(os.path.join(out, "deflated.npz"), input=inputs, tokens=tokens, labels=labels)

    # A .npz with a non-array member, which the reader must refuse with a clear error.
    with zipfile.ZipFile(os.path.join(out, "foreign.npz"), "w") as z:
        z.writestr("readme.txt", "not an array")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "pkg/npy/testdata")
