#!/usr/bin/env python3
"""Interop test: safetensors files cross between minidl and Python's `safetensors` + numpy.

  1. minidl writes a file (tests/io/tools/safetensors_tool write); safetensors.numpy reads it
     and it must hold exactly KNOWN (bit for bit) and metadata producer=minidl.
  2. safetensors.numpy writes KNOWN with metadata producer=python; the tool checks it.

safetensors and numpy are imported from the environment, else from --pydeps, else installed
there with `python3 -m pip install --target`. Exits 77 (ctest SKIP_RETURN_CODE) with the
reason when they are neither importable nor installable. KNOWN must match the tool's values.
"""
import argparse
import importlib
import os
import subprocess
import sys

SKIP = 77
NOTE = "\u00fcn\u00efcode \u2713"  # "ünïcode ✓"


def import_deps(pydeps):
    """Returns (numpy, safetensors.numpy, safetensors) or exits 77 saying why."""
    def try_import():
        try:
            return (importlib.import_module("numpy"), importlib.import_module("safetensors.numpy"),
                    importlib.import_module("safetensors"))
        except ImportError as e:
            return e

    got = try_import()
    if not isinstance(got, ImportError):
        return got
    sys.path.insert(0, pydeps)
    importlib.invalidate_caches()
    got = try_import()
    if not isinstance(got, ImportError):
        return got

    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        print(f"SKIP: safetensors/numpy are not importable ({got}) and {sys.executable} has no pip "
              "to install them (Debian: apt-get install python3-pip)", file=sys.stderr)
        sys.exit(SKIP)
    print(f"interop: installing safetensors and numpy into {pydeps}", file=sys.stderr)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "--target", pydeps, "safetensors", "numpy"], capture_output=True, text=True)
    if pip.returncode != 0:
        print(f"SKIP: safetensors/numpy are not importable and `pip install --target {pydeps} safetensors numpy` "
              f"failed (no network?):\n{pip.stderr.strip()[-2000:]}", file=sys.stderr)
        sys.exit(SKIP)
    importlib.invalidate_caches()
    got = try_import()
    if isinstance(got, ImportError):
        print(f"SKIP: pip installed safetensors and numpy into {pydeps} but they still do not import: {got}",
              file=sys.stderr)
        sys.exit(SKIP)
    return got


def known(np):
    return {
        "f32": np.array([[0.0, -1.5, 3.25], [1e-40, -0.0, np.finfo(np.float32).max]], dtype=np.float32),
        "f64": np.array([1.0 / 3.0, -1e300, 5e-324, 3.141592653589793], dtype=np.float64),
        "i64": np.array([[-2**63, -1], [42, 2**63 - 1]], dtype=np.int64),
        "scalar": np.array(7.5, dtype=np.float64),  # rank 0
        "empty": np.zeros((3, 0), dtype=np.float32),
    }


def same(np, a, b):
    """Same dtype, shape and bytes (so -0.0 and subnormals count)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, help="path of the safetensors_tool executable")
    ap.add_argument("--work-dir", required=True, help="folder for the exchanged files")
    ap.add_argument("--pydeps", required=True, help="folder for pip --target when the packages are missing")
    args = ap.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)

    np, stnp, st = import_deps(args.pydeps)
    print(f"interop: numpy {np.__version__}, safetensors {getattr(st, '__version__', '?')}", file=sys.stderr)
    want = known(np)
    failures = []

    # 1. minidl -> Python
    from_minidl = os.path.join(args.work_dir, "from_minidl.safetensors")
    subprocess.run([args.tool, "write", from_minidl], check=True)
    got = stnp.load_file(from_minidl)
    if sorted(got) != sorted(want):
        failures.append(f"minidl's file holds {sorted(got)}, expected {sorted(want)}")
    for name, w in want.items():
        if name in got and not same(np, got[name], w):
            failures.append(f"minidl's '{name}': {got[name].dtype} {got[name].shape} {got[name]!r}, expected "
                            f"{w.dtype} {w.shape} {w!r}")
    with st.safe_open(from_minidl, framework="np") as f:
        meta = f.metadata()
    if meta != {"producer": "minidl", "note": NOTE}:
        failures.append(f"minidl's metadata is {meta!r}")

    # 2. Python -> minidl
    from_python = os.path.join(args.work_dir, "from_python.safetensors")
    stnp.save_file(want, from_python, metadata={"producer": "python", "note": NOTE})
    check = subprocess.run([args.tool, "check", from_python])
    if check.returncode != 0:
        failures.append(f"safetensors_tool check {from_python} failed (exit {check.returncode})")

    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    if not failures:
        print("interop: minidl -> Python and Python -> minidl agree on every tensor and the metadata")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
