#!/usr/bin/env python3
"""Interop test: safetensors files cross between minidl and Python's `safetensors` + numpy.

  1. minidl writes a file (tests/io/tools/safetensors_tool write); safetensors.numpy reads it
     and it must hold exactly KNOWN (bit for bit) and metadata producer=minidl. Its BF16 and F16
     tensors are minidl's rounding of HALF_CASES' float32 inputs and must hold the table's bits.
     numpy has no bfloat16, so those entries are read from the file by hand (read_raw); F16 is
     also read through safetensors.numpy as np.float16. Where torch is importable,
     safetensors.torch reads the file too and must see the same 16-bit values.
  2. safetensors.numpy writes KNOWN, the F16 tensor (numpy's astype rounding) and the BF16
     tensors (rounded here in integer arithmetic) with metadata producer=python; the tool checks
     it, the 16-bit tensors against the table's bits.

safetensors and numpy are imported from the environment, else from --pydeps, else installed
there with `python3 -m pip install --target`. Exits 77 (ctest SKIP_RETURN_CODE) with the
reason when they are neither importable nor installable. KNOWN and HALF_CASES must match the
tool's values.
"""
import argparse
import importlib
import json
import os
import struct
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


# One float32 input (as its bits, so that -0, NaN and the subnormals need no decimal parsing) and
# the bits it must round to in BF16 and in F16: round to nearest, ties to even; NaN -> 0x7FC0 in
# BF16 (PyTorch's canonical NaN, whatever the sign), a quiet NaN keeping the sign in F16. The NaN
# inputs carry only the quiet bit because F16 conversions differ on payloads (numpy keeps the
# payload's top bits; minidl and PyTorch give 0x7E00). safetensors_tool.cpp's kHalfCases holds the
# same rows in the same order: the two lists must match.
HALF_CASES = [
    (0x00000000, 0x0000, 0x0000, "+0"),
    (0x80000000, 0x8000, 0x8000, "-0 keeps its sign"),
    (0x3F800000, 0x3F80, 0x3C00, "1"),
    (0xC0200000, 0xC020, 0xC100, "-2.5"),
    (0x3DCCCCCD, 0x3DCD, 0x2E66, "0.1f rounds up in both"),
    (0xBDCCCCCD, 0xBDCD, 0xAE66, "-0.1f"),
    (0x3EAAAAAB, 0x3EAB, 0x3555, "1/3"),
    (0x40490FDB, 0x4049, 0x4248, "pi rounds down in both"),
    (0x3F808000, 0x3F80, 0x3C04, "1 + 2^-8: BF16 tie, to even (down)"),
    (0x3F818000, 0x3F82, 0x3C0C, "1 + 3*2^-8: BF16 tie, to even (up)"),
    (0x3F808001, 0x3F81, 0x3C04, "just above a BF16 tie: up"),
    (0x3F7F8000, 0x3F80, 0x3BFC, "1 - 2^-9: BF16 tie up, the carry reaches the exponent"),
    (0x3F801000, 0x3F80, 0x3C00, "1 + 2^-11: F16 tie, to even (down)"),
    (0x3F803000, 0x3F80, 0x3C02, "1 + 3*2^-11: F16 tie, to even (up)"),
    (0x477FE000, 0x4780, 0x7BFF, "65504, F16's largest finite"),
    (0xC77FE000, 0xC780, 0xFBFF, "-65504"),
    (0x477FEFFF, 0x4780, 0x7BFF, "just below 65520: F16 stays finite"),
    (0x477FF000, 0x4780, 0x7C00, "65520: F16 rounds to Inf"),
    (0x7F7FFFFF, 0x7F80, 0x7C00, "FLT_MAX: Inf in both"),
    (0x7F800000, 0x7F80, 0x7C00, "+Inf"),
    (0xFF800000, 0xFF80, 0xFC00, "-Inf"),
    (0x7FC00000, 0x7FC0, 0x7E00, "NaN"),
    (0xFFC00000, 0x7FC0, 0xFE00, "-NaN: BF16 canonical 0x7FC0, F16 keeps the sign"),
    (0x000116C2, 0x0001, 0x0000, "1e-40f: a BF16 subnormal, F16 underflows to 0"),
    (0x00018000, 0x0002, 0x0000, "BF16 subnormal tie, to even (up)"),
    (0x33800000, 0x3380, 0x0001, "2^-24: F16's smallest subnormal"),
    (0x33000000, 0x3300, 0x0000, "2^-25: F16 tie, to even (0)"),
    (0x33000001, 0x3300, 0x0001, "just above 2^-25: F16 up to 2^-24"),
    (0x33C00000, 0x33C0, 0x0002, "3*2^-25: F16 subnormal tie, to even (up)"),
    (0x387FE000, 0x3880, 0x0400, "2^-14 - 2^-25: F16 tie between subnormal and normal, to even (normal)"),
]
BF16_EMPTY_SHAPE = (0, 4)  # "bf16_empty": a BF16 entry with no bytes, as the tool writes it


def bf16_bits_from_f32_bits(u):
    """float32 bits -> bfloat16 bits, round to nearest, ties to even, in integer arithmetic.

    Written as the rule reads (compare the dropped half with 0x8000), not as minidl's add-0x7FFF
    trick, so that the two sides are independent implementations. A carry out of the kept half
    runs into the exponent, which is right: it rounds up to the next binade or to Inf.
    """
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return 0x7FC0  # any NaN: PyTorch's canonical quiet NaN
    kept, dropped = u >> 16, u & 0xFFFF
    if dropped > 0x8000 or (dropped == 0x8000 and kept & 1):
        kept += 1
    return kept


def bf16_bits_to_f32(np, bits):
    """bfloat16 bits (a uint16 array) -> float32 values: a bfloat16 is the upper half of a float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_bits_to_float(b):
    """One bfloat16's bits -> a Python float, with struct only (the cross-check of the numpy decoder)."""
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]


def half_inputs(np):
    """HALF_CASES' float32 inputs, bit for bit."""
    return np.array([c[0] for c in HALF_CASES], dtype=np.uint32).view(np.float32)


def half_expected(np):
    """The 16-bit tensors both sides hold: name -> (safetensors dtype, shape, expected bits as uint16)."""
    n = len(HALF_CASES)
    return {
        "bf16": ("BF16", (n,), np.array([c[1] for c in HALF_CASES], dtype=np.uint16)),
        "f16": ("F16", (n,), np.array([c[2] for c in HALF_CASES], dtype=np.uint16)),
        "bf16_empty": ("BF16", BF16_EMPTY_SHAPE, np.zeros(BF16_EMPTY_SHAPE, dtype=np.uint16)),
    }


def f16_from_f32(np, x):
    """numpy's float32 -> float16 rounding. 65520 and FLT_MAX overflow to Inf on purpose, which
    numpy reports as a RuntimeWarning; the table says Inf, so the warning is noise here."""
    with np.errstate(over="ignore"):
        return x.astype(np.float16)


def self_check(np):
    """This side's encoders and decoders against the table, before they judge minidl: a failure
    here means the table or this script is wrong, not minidl."""
    failures = []
    inputs = half_inputs(np)
    want_f16 = np.array([c[2] for c in HALF_CASES], dtype=np.uint16)
    got_f16 = f16_from_f32(np, inputs).view(np.uint16)
    for i, (u, bf, h, what) in enumerate(HALF_CASES):
        got_bf = bf16_bits_from_f32_bits(u)
        if got_bf != bf:
            failures.append(f"self-check: bf16_bits_from_f32_bits(0x{u:08X}) ({what}) = 0x{got_bf:04X}, "
                            f"the table says 0x{bf:04X}")
        if got_f16[i] != want_f16[i]:
            failures.append(f"self-check: numpy rounds float32 0x{u:08X} ({what}) to F16 0x{int(got_f16[i]):04X}, "
                            f"the table says 0x{h:04X}")
        # The two decoders agree, and a decoded bfloat16 is a float32 that encodes back to itself
        # (it is exact, so no rounding happens): the decode is the inverse of the encode.
        dec = bf16_bits_to_f32(np, [bf])
        via_struct = bf16_bits_to_float(bf)
        dec_bits = int(dec.view(np.uint32)[0])
        if dec_bits != bf << 16 or struct.unpack("<I", struct.pack("<f", via_struct))[0] != dec_bits:
            failures.append(f"self-check: BF16 0x{bf:04X} decodes to float32 0x{dec_bits:08X} (numpy) and "
                            f"{via_struct!r} (struct), expected 0x{bf << 16:08X}")
        elif bf16_bits_from_f32_bits(dec_bits) != bf:
            failures.append(f"self-check: BF16 0x{bf:04X} decoded and encoded again gives "
                            f"0x{bf16_bits_from_f32_bits(dec_bits):04X}")
    return failures


def read_raw(path):
    """Parses a safetensors file by hand: (header entries, metadata, data section bytes).

    [8 bytes little-endian u64 N][N bytes JSON header][data section]; each entry's data_offsets
    are relative to the start of the data section. Needed for BF16, which safetensors.numpy cannot
    hand out (numpy has no bfloat16), and to see the dtype strings the writer put in the header.
    """
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: {len(blob)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(blob)} bytes)")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", None)
    return header, metadata, blob[8 + n:]


def raw_u16(np, entry, data):
    """An entry's bytes as little-endian uint16, the storage of both 16-bit dtypes."""
    begin, end = entry["data_offsets"]
    return np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint16)


def bits_mismatches(np, name, got_bits, want_bits, decode):
    """Messages for the elements whose bits differ, naming the HALF_CASES row (element i of a
    16-bit tensor with elements is row i); `decode` turns bits into values to print."""
    out = []
    got_bits, want_bits = got_bits.reshape(-1), want_bits.reshape(-1)
    for i in np.nonzero(got_bits != want_bits)[0]:
        u, _, _, what = HALF_CASES[i]
        out.append(f"'{name}'[{i}] (float32 0x{u:08X}, {what}): bits 0x{int(got_bits[i]):04X} "
                   f"= {decode(got_bits[i:i + 1])[0]!r}, expected 0x{int(want_bits[i]):04X} "
                   f"= {decode(want_bits[i:i + 1])[0]!r}")
    return out


def decoder_for(np, dtype):
    """bits -> values for a 16-bit dtype, to print in messages and to compare with torch's values."""
    if dtype == "BF16":
        return lambda bits: bf16_bits_to_f32(np, bits)
    return lambda bits: np.asarray(bits, dtype=np.uint16).view(np.float16)


def check_with_torch(np, path, halves):
    """safetensors.torch reads minidl's file and must see the table's 16-bit values. Skipped, with
    a line saying so, where torch is not importable (as on CI, where it is not installed)."""
    try:
        torch = importlib.import_module("torch")
        sttorch = importlib.import_module("safetensors.torch")
    except (ImportError, OSError) as e:  # OSError: a torch whose native libraries do not load
        print(f"interop: torch is not importable ({e}); skipping the check that safetensors.torch reads "
              "minidl's BF16/F16 tensors", file=sys.stderr)
        return []
    torch_dtypes = {"BF16": torch.bfloat16, "F16": torch.float16}
    failures = []
    got = sttorch.load_file(path)
    for name, (dtype, shape, want_bits) in halves.items():
        t = got.get(name)
        if t is None:
            failures.append(f"torch: minidl's file has no '{name}'")
            continue
        if t.dtype != torch_dtypes[dtype] or tuple(t.shape) != shape:
            failures.append(f"torch: minidl's '{name}' is {t.dtype} {tuple(t.shape)}, expected "
                            f"{torch_dtypes[dtype]} {shape}")
            continue
        # The bits (view as int16: numpy cannot take a bfloat16 tensor), then the values torch
        # computes with (float32; exact for both formats). NaN compares equal to NaN here, and
        # the sign bit is compared too, so -0 and -NaN count.
        bits = t.contiguous().view(torch.int16).numpy().view(np.uint16).reshape(shape)
        failures += [f"torch: {m}" for m in bits_mismatches(np, name, bits, want_bits, decoder_for(np, dtype))]
        values = t.float().numpy().reshape(-1)
        want_values = decoder_for(np, dtype)(want_bits).astype(np.float32).reshape(-1)
        agree = (values == want_values) | (np.isnan(values) & np.isnan(want_values))
        for i in np.nonzero(~agree | (np.signbit(values) != np.signbit(want_values)))[0]:
            failures.append(f"torch: minidl's '{name}'[{i}] ({HALF_CASES[i][3]}) as float32 is {values[i]!r}, "
                            f"expected {want_values[i]!r}")
    if not failures:
        print(f"interop: torch {torch.__version__} reads minidl's BF16/F16 tensors as the table says", file=sys.stderr)
    return failures


def relabel_u16_as_bf16(path, names):
    """Rewrites the header of a file safetensors.numpy wrote so that the U16 entries `names` say
    BF16. safetensors.numpy cannot write BF16 (numpy has no bfloat16), and the package's low-level
    serialize() has changed its input form between releases; so the library lays out the
    hand-rounded bits as U16, same element size, and only the dtype string changes: the
    data_offsets and the data section stay as the library wrote them. The new header is padded
    with spaces to a multiple of 8 bytes, as the library pads its own."""
    header, metadata, data = read_raw(path)
    for name in names:
        if header[name]["dtype"] != "U16":
            raise ValueError(f"{path}: '{name}' is {header[name]['dtype']}, expected U16 to relabel")
        header[name]["dtype"] = "BF16"
    if metadata is not None:
        header = {"__metadata__": metadata, **header}  # first, where the library puts it
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


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
    halves = half_expected(np)
    # The table and this side's rounding are checked first: the rest relies on them.
    failures = self_check(np)

    # 1. minidl -> Python
    from_minidl = os.path.join(args.work_dir, "from_minidl.safetensors")
    subprocess.run([args.tool, "write", from_minidl], check=True)
    header, meta_raw, data = read_raw(from_minidl)
    if sorted(header) != sorted([*want, *halves]):
        failures.append(f"minidl's file holds {sorted(header)}, expected {sorted([*want, *halves])}")
    # Through the library, tensor by tensor: load_file would refuse the whole file over its BF16
    # entries, which numpy cannot represent.
    with st.safe_open(from_minidl, framework="np") as f:
        meta = f.metadata()
        got = {name: f.get_tensor(name) for name in [*want, "f16"] if name in header}
    for name, w in want.items():
        if name in got and not same(np, got[name], w):
            failures.append(f"minidl's '{name}': {got[name].dtype} {got[name].shape} {got[name]!r}, expected "
                            f"{w.dtype} {w.shape} {w!r}")
    if meta != {"producer": "minidl", "note": NOTE} or meta_raw != meta:
        failures.append(f"minidl's metadata is {meta!r} (read by hand: {meta_raw!r})")
    # The 16-bit tensors by hand, bits against the table.
    for name, (dtype, shape, want_bits) in halves.items():
        entry = header.get(name)
        if entry is None:
            continue  # reported above
        if entry["dtype"] != dtype or tuple(entry["shape"]) != shape:
            failures.append(f"minidl's '{name}' is {entry['dtype']} {entry['shape']}, expected {dtype} {list(shape)}")
            continue
        bits = raw_u16(np, entry, data).reshape(shape)
        failures += [f"minidl's {m}" for m in bits_mismatches(np, name, bits, want_bits, decoder_for(np, dtype))]
    # F16 through numpy as well: safetensors.numpy hands it out as np.float16, the same bits.
    if "f16" in got:
        g = got["f16"]
        if g.dtype != np.float16 or g.shape != halves["f16"][1]:
            failures.append(f"safetensors.numpy reads minidl's 'f16' as {g.dtype} {g.shape}, expected float16 "
                            f"{halves['f16'][1]}")
        else:
            failures += [f"safetensors.numpy: minidl's {m}"
                         for m in bits_mismatches(np, "f16", g.view(np.uint16), halves["f16"][2],
                                                  decoder_for(np, "F16"))]
    failures += check_with_torch(np, from_minidl, halves)

    # 2. Python -> minidl. F16 is numpy's rounding, BF16 this script's; both from the same float32
    # inputs minidl rounded in part 1.
    from_python = os.path.join(args.work_dir, "from_python.safetensors")
    inputs = half_inputs(np)
    to_write = dict(want)
    to_write["f16"] = f16_from_f32(np, inputs)
    to_write["bf16"] = np.array([bf16_bits_from_f32_bits(int(u)) for u in inputs.view(np.uint32)], dtype=np.uint16)
    to_write["bf16_empty"] = np.zeros(BF16_EMPTY_SHAPE, dtype=np.uint16)
    stnp.save_file(to_write, from_python, metadata={"producer": "python", "note": NOTE})
    relabel_u16_as_bf16(from_python, ["bf16", "bf16_empty"])
    # The relabelled file must still be one the reference implementation accepts (its header
    # checks: offsets, sizes, coverage), so that minidl is not judged on a file only it would read.
    with st.safe_open(from_python, framework="np") as f:
        if sorted(f.keys()) != sorted(to_write):
            failures.append(f"safetensors reads the relabelled file as holding {sorted(f.keys())}")
    check = subprocess.run([args.tool, "check", from_python])
    if check.returncode != 0:
        failures.append(f"safetensors_tool check {from_python} failed (exit {check.returncode})")

    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    if not failures:
        print(f"interop: minidl -> Python and Python -> minidl agree on every tensor (the 16-bit ones on all "
              f"{len(HALF_CASES)} rounding cases, both ways) and the metadata")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
