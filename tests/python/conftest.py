"""Shared fixtures of the Python tests: the golden FlashMLA vectors, seeded RNGs, docs/spec.md tolerances."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

BF16 = ml_dtypes.bfloat16
FP8 = ml_dtypes.float8_e4m3fn
REPO_ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def testdata_dir() -> Path:
    """MLAKIT_TESTDATA_DIR when set; else the repository's own golden vectors (tests/data), unpacked into
    build/testdata: the folder a default CMake build unpacks them into, reused when already right."""
    if os.environ.get("MLAKIT_TESTDATA_DIR"):
        return Path(os.environ["MLAKIT_TESTDATA_DIR"])
    spec = importlib.util.spec_from_file_location("golden", REPO_ROOT / "tests" / "data" / "golden.py")
    golden = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(golden)
    return golden.unpack(REPO_ROOT / "build" / "testdata", quiet=True)


def flashmla_cases(dataset: str = "flashmla"):
    """(case dict, folder) for every case of <dataset>/manifest.json; empty when the data is missing."""
    manifest = testdata_dir() / dataset / "manifest.json"
    if not manifest.is_file():
        return []
    cases = json.loads(manifest.read_text())["cases"]
    return [pytest.param(c, manifest.parent / c["name"], id=c["name"]) for c in cases]


def require_testdata():
    if not (testdata_dir() / "flashmla" / "manifest.json").is_file():
        pytest.skip(f"golden FlashMLA vectors not found in {testdata_dir()} (set MLAKIT_TESTDATA_DIR)")


def load_case(folder: Path) -> dict:
    """Every .npy of a case; bf16 files (stored as uint16 bit patterns) come back as ml_dtypes bf16."""
    arrays = {}
    for f in sorted(folder.glob("*.npy")):
        a = np.load(f)
        arrays[f.stem] = a.view(BF16) if a.dtype == np.uint16 else a
    return arrays


def bf16_tolerance(ref: np.ndarray, vmax) -> np.ndarray:
    """docs/spec.md section 10, bf16 outputs: 2^-8 * vmax + 2^-6 * |ref| (vmax broadcast per row)."""
    return 2.0**-8 * vmax + 2.0**-6 * np.abs(ref)


def fp16_tolerance(ref: np.ndarray, vmax) -> np.ndarray:
    return 2.0**-10 * vmax + 2.0**-9 * np.abs(ref)


def assert_close(got, ref, tol, what: str):
    """Every element within `tol`; NaN/inf where ref is finite fails; reports the worst element."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    finite = np.isfinite(ref)
    assert np.array_equal(got[~finite], ref[~finite]), f"{what}: non-finite reference values not matched exactly"
    assert np.all(np.isfinite(got[finite])), f"{what}: NaN/inf where the reference is finite"
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(got - ref), 0.0)
    tol = np.broadcast_to(tol, ref.shape)
    bad = err > tol
    if bad.any():
        i = np.unravel_index(np.argmax(err - np.where(finite, tol, 0)), ref.shape)
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {ref.size} elements out of tolerance; worst at {i}: "
            f"got {got[i]!r}, ref {ref[i]!r}, tol {tol[i]!r}"
        )


def assert_lse_close(got, ref, what="lse"):
    """docs/spec.md section 10: |lse - ref| <= 1e-4 + 1e-4 |ref|; infinite rows must match exactly."""
    ref = np.asarray(ref, np.float64)
    assert_close(got, ref, 1e-4 + 1e-4 * np.abs(np.where(np.isfinite(ref), ref, 0)), what)


@pytest.fixture
def rng(request):
    """A generator seeded from the test's name, so every test draws its own reproducible inputs."""
    seed = sum(ord(c) * (i + 1) for i, c in enumerate(request.node.nodeid)) % (2**32)
    return np.random.default_rng(seed)
