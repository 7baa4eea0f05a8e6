#!/usr/bin/env python3
"""Packs and unpacks the golden test vectors of tests/data (Python standard library only).

Golden vectors are .npy files, mostly random bf16 and fp8 data that no compressor shrinks much (the mantissa
bits are random). What is stored here is what cannot be recomputed; unpacking recomputes the rest, exactly
(tests/data/README.md gives the sizes):

- bf16 arrays (`<u2`) are split into an exponent stream (8 exponent bits per value: skewed, compresses
  well) and a sign + mantissa stream (8 nearly random bits per value), each xz-compressed on its own;
- rows that are entirely one filler pattern (the NaN rows FlashMLA's dense caches hold past each
  request's length) are not stored: a one-byte-per-row mask says where they go;
- fp8 caches that were made from a bf16 file of the same case (`kv_cache` next to `kv_bf16`) are not
  stored: they are rebuilt with the writer rules of docs/spec.md section 4 (`fp8_ds_mla`, `fp8_ds_v4`);
- everything else (indices, lengths, lse, fp8 caches without a bf16 source) is stored as is, xz-compressed.

`unpack` writes the original files and checks each against tests/data/SHA256SUMS (the SHA-256 of the files
as FlashMLA's run produced them) before writing it, so the tests always read byte-identical files; a folder
that already holds the right files is left alone. `pack` rebuilds the packs from the original folders and
refuses any file it cannot reproduce exactly.

    python3 tests/data/golden.py unpack DEST          # every stored dataset: DEST/flashmla/...
    python3 tests/data/golden.py pack SRC flashmla    # SRC/flashmla/... -> tests/data (maintainers only)
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import lzma
import math
import os
import shutil
import struct
import sys
import tempfile
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUMS = HERE / "SHA256SUMS"
# A dataset <name> stored here is HERE/<name>/ (README.md, manifest.json), HERE/<name>.pack.json (one entry
# per .npy file, in unpack order) and its three streams HERE/<name>.{exp,man,raw}.xz.
STREAMS = ("exp", "man", "raw")
# LZMA2 without literal context: the streams are byte-wise independent draws, not text.
FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "lc": 0, "lp": 0, "pb": 0}]


# ---- bf16 <-> (exponent, sign + mantissa) byte planes -------------------------------------------------
# A little-endian bf16 is (lo, hi) = (e0 m6..m0, s e7..e1). exp = e7..e0; man = s m6..m0.
def _table(f):
    return bytes(f(x) for x in range(256))


_HI_EXP, _LO_EXP = _table(lambda x: (x & 0x7F) << 1), _table(lambda x: x >> 7)
_EXP_HI, _EXP_LO = _table(lambda x: x >> 1), _table(lambda x: (x & 1) << 7)
_SIGN, _MANT = _table(lambda x: x & 0x80), _table(lambda x: x & 0x7F)


def _or(a: bytes, b: bytes) -> bytes:
    """Byte-wise OR of two equally long byte strings (bits never overlap here)."""
    n = len(a)
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(n, "little")


def split_bf16(data: bytes) -> tuple[bytes, bytes]:
    lo, hi = data[0::2], data[1::2]
    return _or(hi.translate(_HI_EXP), lo.translate(_LO_EXP)), _or(hi.translate(_SIGN), lo.translate(_MANT))


def join_bf16(exp: bytes, man: bytes) -> bytes:
    out = bytearray(2 * len(exp))
    out[0::2] = _or(exp.translate(_EXP_LO), man.translate(_MANT))
    out[1::2] = _or(exp.translate(_EXP_HI), man.translate(_SIGN))
    return bytes(out)


def u16(data: bytes) -> array:
    a = array("H", data)
    if sys.byteorder == "big":
        a.byteswap()
    return a


# ---- the fp8 writers of docs/spec.md section 4 -----------------------------------------------------
def bf16_value(bits: int) -> float:
    """The bf16 pattern's value (finite patterns only: the caches these rebuild hold no NaN/inf)."""
    e, m = (bits >> 7) & 0xFF, bits & 0x7F
    v = math.ldexp(m, -133) if e == 0 else math.ldexp(128 + m, e - 134)
    return -v if bits & 0x8000 else v


def group_scale_exp(amax_bits: int) -> int:
    """k with 2^k = the smallest power of two >= max(amax / 448, 1e-4). Exact in float64: amax is a bf16,
    so amax / 448 is never within float32 rounding of a power of two it is not equal to."""
    ratio = max(bf16_value(amax_bits) / 448.0, 1e-4)
    frac, e = math.frexp(ratio)
    return e - 1 if frac == 0.5 else e


_E4M3: dict[tuple[int, int], int] = {}


def e4m3(bits: int, k: int) -> int:
    """e4m3fn byte of bf16 `bits` / 2^k, round to nearest even, saturating at 448 (numeric.h's rules)."""
    key = (bits, k)
    byte = _E4M3.get(key)
    if byte is None:
        sign = 0x80 if bits & 0x8000 else 0
        a = math.ldexp(abs(bf16_value(bits)), -k)  # exact: a power-of-two scale
        if a >= 448.0:
            byte = sign | 0x7E
        elif a < 2.0**-6:
            byte = sign | round(a * 512.0)  # subnormal steps of 2^-9; round() ties to even
        else:
            frac, e = math.frexp(a)
            m, biased = round((frac * 2.0 - 1.0) * 8.0), e - 1 + 7
            if m == 8:
                m, biased = 0, biased + 1
            byte = sign | (biased << 3) | m
        _E4M3[key] = byte
    return byte


def quantise(row: array, start: int, stop: int, group: int) -> tuple[bytes, list[int]]:
    """e4m3 bytes of row[start:stop] with one power-of-two scale per `group` values, and the scales' k."""
    out, ks = bytearray(), []
    for g in range(start, stop, group):
        vals = row[g : g + group]
        k = group_scale_exp(max(v & 0x7FFF for v in vals))
        ks.append(k)
        out += bytes(e4m3(v, k) for v in vals)
    return bytes(out), ks


def encode_fp8_ds_mla(kv_bf16: bytes) -> bytes:
    """656-byte rows from 576-wide bf16 rows: 512 e4m3 (4 groups of 128), 4 float32 scales, 64 bf16."""
    values, out = u16(kv_bf16), bytearray()
    for r in range(0, len(values), 576):
        row = values[r : r + 576]
        quant, ks = quantise(row, 0, 512, 128)
        out += quant
        out += struct.pack("<4f", *(math.ldexp(1.0, k) for k in ks))
        out += kv_bf16[2 * (r + 512) : 2 * (r + 576)]
    return bytes(out)


def encode_fp8_ds_v4(kv_bf16: bytes, page_size: int, page_bytes: int) -> bytes:
    """DeepSeek V4 pages from 512-wide bf16 rows: per page, P blocks of (448 e4m3, 64 bf16), then P blocks
    of (7 UE8M0 scale bytes 127 + k, one zero byte), zero-padded to page_bytes."""
    values, out = u16(kv_bf16), bytearray()
    rows = len(values) // 512
    for p in range(0, rows, page_size):
        blocks, scales = bytearray(), bytearray()
        for r in range(p, p + page_size):
            row = values[r * 512 : (r + 1) * 512]
            quant, ks = quantise(row, 0, 448, 64)
            blocks += quant + kv_bf16[2 * (r * 512 + 448) : 2 * (r + 1) * 512]
            scales += bytes(127 + k for k in ks) + b"\0"
        page = blocks + scales
        out += page + bytes(page_bytes - len(page))
    return bytes(out)


# ---- .npy files ----------------------------------------------------------------------------------------
def npy_split(blob: bytes) -> tuple[str, str, tuple[int, ...]]:
    """(header text as latin-1, dtype descr, shape) of a version 1.0 .npy blob."""
    assert blob[:8] == b"\x93NUMPY\x01\x00", "only .npy format 1.0"
    n = 10 + int.from_bytes(blob[8:10], "little")
    meta = ast.literal_eval(blob[10:n].decode("latin-1"))  # a dict literal, written by numpy
    assert not meta["fortran_order"]
    return blob[:n].decode("latin-1"), meta["descr"], tuple(meta["shape"])


def xz(data: bytes) -> bytes:
    return lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32, filters=FILTERS)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_sums() -> dict[str, str]:
    sums = {}
    for line in SUMS.read_text().splitlines():
        digest, path = line.split(maxsplit=1)
        sums[path.lstrip("*")] = digest
    return sums


def derive(entry: dict, case_files: dict[str, bytes]) -> bytes:
    """A file rebuilt from its source file in the same case (entry["from"]) by a section 4 writer."""
    src = case_files[entry["from"]]
    body = src[len(npy_split(src)[0]) :]
    if entry["codec"] == "fp8_ds_mla":
        return encode_fp8_ds_mla(body)
    return encode_fp8_ds_v4(body, entry["page_size"], entry["page_bytes"])


# ---- pack ----------------------------------------------------------------------------------------------
def pack_dataset(src: Path, name: str, sums: list[str]) -> None:
    root = src / name
    streams = {s: bytearray() for s in STREAMS}
    entries = []
    for case in sorted(p for p in root.iterdir() if p.is_dir()):
        files = {f.name: f.read_bytes() for f in sorted(case.glob("*.npy"))}
        # Sources first, so a derived file's source is already unpacked when it is rebuilt.
        for fname in sorted(files, key=lambda f: (f == "kv_cache.npy", f)):
            blob = files[fname]
            header, descr, shape = npy_split(blob)
            body = blob[len(header) :]
            rel = f"{case.name}/{fname}"
            sums.append(f"{sha256(blob)}  {name}/{rel}")
            entry = {"path": rel, "header": header}
            if descr == "|u1" and fname == "kv_cache.npy" and "kv_bf16.npy" in files:
                _, _, src_shape = npy_split(files["kv_bf16.npy"])
                if len(shape) == 4:  # [num_pages, P, 1, 656]
                    entry.update(codec="fp8_ds_mla", **{"from": "kv_bf16.npy"})
                else:  # [num_pages, page_bytes]
                    entry.update(codec="fp8_ds_v4", page_size=src_shape[1], page_bytes=shape[1],
                                 **{"from": "kv_bf16.npy"})
                if derive(entry, files) != body:
                    raise SystemExit(f"{name}/{rel}: the writer of docs/spec.md section 4 does not reproduce it")
            elif descr == "<u2":
                width = shape[-1]
                rows = [body[i : i + 2 * width] for i in range(0, len(body), 2 * width)]
                fill = b"\xff\xff" * width
                mask = bytes(r == fill for r in rows)
                if any(mask):
                    entry.update(codec="bf16_rows", width=width, fill=0xFFFF, mask_bytes=len(mask))
                    streams["raw"] += mask
                    body = b"".join(r for r in rows if r != fill)
                else:
                    entry.update(codec="bf16")
                exp, man = split_bf16(body)
                entry["values"] = len(exp)
                streams["exp"] += exp
                streams["man"] += man
            else:
                entry.update(codec="raw", bytes=len(body))
                streams["raw"] += body
            entries.append(entry)
    for s in STREAMS:
        (HERE / f"{name}.{s}.xz").write_bytes(xz(bytes(streams[s])))
    index = {"dataset": name, "streams": {s: len(streams[s]) for s in STREAMS}, "files": entries}
    (HERE / f"{name}.pack.json").write_text(json.dumps(index, indent=1) + "\n")
    # manifest.json is kept verbatim in HERE/<name>/; README.md is copied the first time, then edited there.
    (HERE / name).mkdir(exist_ok=True)
    shutil.copyfile(root / "manifest.json", HERE / name / "manifest.json")
    if not (HERE / name / "README.md").exists():
        shutil.copyfile(root / "README.md", HERE / name / "README.md")
    sums.append(f"{sha256((root / 'manifest.json').read_bytes())}  {name}/manifest.json")


# ---- unpack --------------------------------------------------------------------------------------------
class Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        out = self.data[self.at : self.at + n]
        assert len(out) == n, "pack stream too short"
        self.at += n
        return out


def unpack_dataset(name: str, dest: Path, sums: dict[str, str]) -> None:
    index = json.loads((HERE / f"{name}.pack.json").read_text())
    streams = {s: Reader(lzma.decompress((HERE / f"{name}.{s}.xz").read_bytes())) for s in STREAMS}
    for s in STREAMS:
        assert len(streams[s].data) == index["streams"][s], f"{name}.{s}.xz: unexpected length"
    case_files: dict[str, dict[str, bytes]] = {}
    for entry in index["files"]:
        case, fname = entry["path"].split("/")
        files = case_files.setdefault(case, {})
        header = entry["header"].encode("latin-1")
        codec = entry["codec"]
        if codec in ("bf16", "bf16_rows"):
            body = join_bf16(streams["exp"].take(entry["values"]), streams["man"].take(entry["values"]))
            if codec == "bf16_rows":
                n = 2 * entry["width"]
                fill = entry["fill"].to_bytes(2, "little") * entry["width"]
                kept = (body[i : i + n] for i in range(0, len(body), n))
                body = b"".join(fill if m else next(kept) for m in streams["raw"].take(entry["mask_bytes"]))
        elif codec == "raw":
            body = streams["raw"].take(entry["bytes"])
        else:
            body = derive(entry, files)
        blob = header + body
        path = f"{name}/{entry['path']}"
        if sha256(blob) != sums[path]:
            raise SystemExit(f"golden.py: {path} does not match its SHA-256 in {SUMS}")
        files[fname] = blob
        out = dest / entry["path"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(blob)
    for s in STREAMS:
        assert streams[s].at == len(streams[s].data), f"{name}.{s}.xz: bytes left over"
    for doc in ("manifest.json", "README.md"):
        shutil.copyfile(HERE / name / doc, dest / doc)
    if sha256((dest / "manifest.json").read_bytes()) != sums[f"{name}/manifest.json"]:
        raise SystemExit(f"golden.py: {name}/manifest.json does not match its SHA-256 in {SUMS}")


def up_to_date(dest: Path, name: str, sums: dict[str, str]) -> bool:
    """Every file of the dataset is in dest with its SHA-256, and the README is the current one."""
    try:
        for path, digest in sums.items():
            if path.startswith(name + "/") and sha256((dest / path).read_bytes()) != digest:
                return False
        return (dest / name / "README.md").read_bytes() == (HERE / name / "README.md").read_bytes()
    except OSError:
        return False


def datasets() -> list[str]:
    """The datasets stored in tests/data."""
    return sorted(p.name[: -len(".pack.json")] for p in HERE.glob("*.pack.json"))


def unpack(dest: Path, quiet: bool = False) -> Path:
    """Regenerates every dataset into dest (left alone where already right); returns dest."""
    dest = Path(dest)
    sums = read_sums()
    for name in datasets():
        if up_to_date(dest, name, sums):
            continue
        dest.mkdir(parents=True, exist_ok=True)
        # Into a fresh folder first, then renamed: an interrupted unpack never leaves a partial dataset.
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest))
        os.chmod(tmp, 0o755)  # mkdtemp's folder is private
        try:
            unpack_dataset(name, tmp, sums)
            shutil.rmtree(dest / name, ignore_errors=True)
            os.replace(tmp, dest / name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if not quiet:
            print(f"golden.py: unpacked {name} into {dest / name} (SHA-256 verified)")
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("unpack", help="regenerate the .npy files into DEST").add_argument("dest", type=Path)
    pk = sub.add_parser("pack", help="(re)store datasets from the original folders SRC/<name>")
    pk.add_argument("src", type=Path)
    pk.add_argument("names", nargs="+", metavar="name", help="dataset folder names, e.g. flashmla")
    args = ap.parse_args()
    if args.cmd == "unpack":
        unpack(args.dest)
        return 0
    keep = [line for line in (SUMS.read_text().splitlines() if SUMS.exists() else [])
            if line.split(maxsplit=1)[1].split("/")[0] not in args.names]
    sums: list[str] = []
    for name in args.names:
        pack_dataset(args.src, name, sums)
    SUMS.write_text("\n".join(sorted(keep + sums, key=lambda line: line.split(maxsplit=1)[1])) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
