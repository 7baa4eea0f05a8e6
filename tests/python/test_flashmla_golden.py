"""Every golden FlashMLA case (tests/data/flashmla) through mlakit.compat.flashmla unchanged, and
through the native API after converting its two conventions (lse layout and the sign of empty rows)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import (
    BF16,
    FP8,
    assert_close,
    assert_lse_close,
    bf16_tolerance,
    flashmla_cases,
    load_case,
    require_testdata,
)

import mlakit
from mlakit.compat.flashmla import (
    MlaMetadata,
    SoftmaxScaleDefaultWarning,
    flash_mla_with_kvcache,
    get_mla_metadata,
)

D_C = 512  # head_dim_v of every golden case
ROW_BYTES_DS_MLA = 656
GROUP = 128

CASES = flashmla_cases() or [pytest.param(None, None, id="no-testdata")]
SPARSE_CASES = [c for c in flashmla_cases() if c.values[0]["op"] == "sparse_decode"] or [
    pytest.param(None, None, id="no-testdata")
]


def dense_vmax(d: dict, page_size: int) -> np.ndarray:
    """Per request: the largest |V| over the rows it attends (docs/spec.md section 10), shape [b, 1, 1, 1]."""
    kv = d["kv_cache"].astype(np.float32)[:, :, 0, :D_C]
    vmax = np.zeros(len(d["seq_lens"]))
    for b, length in enumerate(d["seq_lens"]):
        t = np.arange(length)
        rows = kv[d["block_table"][b, t // page_size], t % page_size]
        vmax[b] = np.abs(rows).max() if length else 0.0
    return vmax[:, None, None, None]


def dequant_ds_mla(cache: np.ndarray) -> np.ndarray:
    """fp8_ds_mla bytes [..., 656] -> float32 kv_c [..., 512] (docs/spec.md section 4)."""
    quant = cache[..., :D_C].view(FP8).astype(np.float32)
    scales = cache[..., D_C : D_C + 16].copy().view(np.float32)
    return quant * np.repeat(scales, GROUP, axis=-1)


def sparse_vmax(d: dict) -> np.ndarray:
    """Per (request, query token): largest |V| over the valid rows its indices name, shape [b, s_q, 1, 1]."""
    kv = dequant_ds_mla(d["kv_cache"][:, :, 0, :]).reshape(-1, D_C)
    idx = d["indices"]
    vmax = np.zeros(idx.shape[:2])
    for b in range(idx.shape[0]):
        for s in range(idx.shape[1]):
            valid = idx[b, s][(idx[b, s] >= 0) & (idx[b, s] < kv.shape[0])]
            vmax[b, s] = np.abs(kv[valid]).max() if valid.size else 0.0
    return vmax[:, :, None, None]


def run_compat(case: dict, d: dict):
    meta, num_splits = get_mla_metadata(d.get("seq_lens"), case["s_q"] * case["h_q"], 1)
    if case["op"] == "dense_decode":
        return flash_mla_with_kvcache(
            d["q"], d["kv_cache"], d["block_table"], d["seq_lens"], D_C, meta, num_splits,
            softmax_scale=case["softmax_scale"], causal=case["causal"],
        )
    return flash_mla_with_kvcache(
        d["q"], d["kv_cache"], None, None, D_C, meta, num_splits,
        softmax_scale=case["softmax_scale"], is_fp8_kvcache=True, indices=d["indices"],
    )


def vmax_of(case, d):
    return dense_vmax(d, case["page_size"]) if case["op"] == "dense_decode" else sparse_vmax(d)


@pytest.mark.parametrize("case,folder", CASES)
def test_compat_reproduces_flashmla(case, folder):
    require_testdata()
    d = load_case(folder)
    out, lse = run_compat(case, d)
    assert out.dtype == BF16 and out.shape == d["out"].shape
    assert lse.dtype == np.float32 and lse.shape == d["lse"].shape  # FlashMLA's [b, h_q, s_q]
    ref = d["out"].astype(np.float64)
    assert_close(out, ref, bf16_tolerance(ref, vmax_of(case, d)), f"{case['name']}: out")
    assert_lse_close(lse, d["lse"], f"{case['name']}: lse")


@pytest.mark.parametrize("case,folder", CASES)
def test_native_api_matches_after_converting_conventions(case, folder):
    """Native conventions: lse [b, s_q, h_q], -inf for empty rows (docs/spec.md section 1)."""
    require_testdata()
    d = load_case(folder)
    q = d["q"]
    b, s_q, h_q, _ = q.shape
    out = np.full((b, s_q, h_q, D_C), np.nan, BF16)  # poisoned: every element must be written
    lse = np.full((b, s_q, h_q), np.nan, np.float32)
    if case["op"] == "dense_decode":
        mlakit.decode(q, d["kv_cache"], d["block_table"], d["seq_lens"], out, lse,
                      softmax_scale=case["softmax_scale"], causal=case["causal"])
    else:
        cache = mlakit.KvCache(d["kv_cache"], "fp8_ds_mla")
        mlakit.sparse_decode(q, cache, d["indices"], out, lse, softmax_scale=case["softmax_scale"])
    ref = d["out"].astype(np.float64)
    assert_close(out, ref, bf16_tolerance(ref, vmax_of(case, d)), f"{case['name']}: out")
    ref_lse = np.swapaxes(d["lse"], 1, 2)
    ref_lse = np.where(ref_lse == np.inf, -np.inf, ref_lse)
    assert_lse_close(lse, ref_lse, f"{case['name']}: native lse")


@pytest.mark.parametrize("case,folder", SPARSE_CASES)
def test_append_kv_reproduces_fp8_ds_mla_bytes(case, folder):
    """README: append_kv must reproduce the golden fp8_ds_mla bytes exactly from kv_bf16."""
    require_testdata()
    d = load_case(folder)
    src = d["kv_bf16"][:, :, 0, :]  # [num_pages, P, 576]
    num_pages, page_size, _ = src.shape
    rows = src.reshape(-1, src.shape[-1])
    cache = np.full((num_pages, page_size, ROW_BYTES_DS_MLA), 0xFF, np.uint8)  # 0xFF bytes are e4m3 NaN
    slots = np.arange(rows.shape[0], dtype=np.int64)
    mlakit.append_kv(np.ascontiguousarray(rows[:, :D_C]), np.ascontiguousarray(rows[:, D_C:]), slots,
                     mlakit.KvCache(cache, "fp8_ds_mla"))
    written = np.isfinite(rows.astype(np.float32)).all(axis=1).reshape(num_pages, page_size)
    np.testing.assert_array_equal(cache[written], d["kv_cache"][:, :, 0, :][written])


def test_default_softmax_scale_follows_flashmla_and_warns():
    require_testdata()
    (case, folder), *_ = [p.values for p in flashmla_cases() if p.values[0]["op"] == "dense_decode"]
    d = load_case(folder)
    meta, splits = get_mla_metadata(d["seq_lens"], case["s_q"] * case["h_q"], 1)
    with pytest.warns(SoftmaxScaleDefaultWarning, match=r"1/sqrt\(576\)"):
        out_default, _ = flash_mla_with_kvcache(d["q"], d["kv_cache"], d["block_table"], d["seq_lens"], D_C,
                                                meta, splits, causal=case["causal"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out_explicit, _ = flash_mla_with_kvcache(d["q"], d["kv_cache"], d["block_table"], d["seq_lens"], D_C,
                                                 None, None, softmax_scale=576**-0.5, causal=case["causal"])
    np.testing.assert_array_equal(out_default.view(np.uint16), out_explicit.view(np.uint16))


def test_metadata_plans_once_per_step_and_replans_on_change():
    require_testdata()
    dense = [p.values for p in flashmla_cases() if p.values[0]["op"] == "dense_decode"]
    case, folder = dense[0]
    d = load_case(folder)
    meta, _ = get_mla_metadata(d["seq_lens"], case["s_q"] * case["h_q"], 1)
    assert isinstance(meta, MlaMetadata) and meta.backend is None
    args = (d["q"], d["kv_cache"], d["block_table"], d["seq_lens"], D_C, meta, None)
    out1, _ = flash_mla_with_kvcache(*args, softmax_scale=case["softmax_scale"], causal=case["causal"])
    plan = meta._plan
    out2, _ = flash_mla_with_kvcache(*args, softmax_scale=case["softmax_scale"], causal=case["causal"])
    assert meta._plan is plan, "a second layer with the same arrays must reuse the step's plan"
    np.testing.assert_array_equal(out1.view(np.uint16), out2.view(np.uint16))
    flash_mla_with_kvcache(*args, softmax_scale=0.5, causal=case["causal"])
    assert meta._plan is not plan, "a different softmax_scale must re-plan"
    assert meta.backend == "reference"


def test_metadata_reused_after_reallocation_plans_for_the_new_arrays():
    """Issue 11's "graph-captured metadata reused after reallocation": a step's metadata object used again after the
    caller freed its block table and lengths and allocated new ones (same shapes and dtypes, other contents) must
    schedule the new arrays, never the plan made for the freed ones."""
    require_testdata()
    dense = [p.values for p in flashmla_cases() if p.values[0]["op"] == "dense_decode"]
    case, folder = dense[0]
    d = load_case(folder)
    kwargs = {"softmax_scale": case["softmax_scale"], "causal": case["causal"]}
    meta, _ = get_mla_metadata(d["seq_lens"], case["s_q"] * case["h_q"], 1)
    table, lens = d["block_table"].copy(), d["seq_lens"].copy()
    first, _ = flash_mla_with_kvcache(d["q"], d["kv_cache"], table, lens, D_C, meta, None, **kwargs)
    del table, lens  # the caller lets them go (the step's plan still holds them, so their ids stay taken)
    table = d["block_table"].copy()
    lens = (d["seq_lens"] // 2).astype(d["seq_lens"].dtype)
    assert not np.array_equal(lens, d["seq_lens"]), "the case needs lengths that halving changes"
    again, _ = flash_mla_with_kvcache(d["q"], d["kv_cache"], table, lens, D_C, meta, None, **kwargs)
    fresh, _ = flash_mla_with_kvcache(d["q"], d["kv_cache"], table, lens, D_C, None, None, **kwargs)
    np.testing.assert_array_equal(again.view(np.uint16), fresh.view(np.uint16))
    assert not np.array_equal(again.view(np.uint16), first.view(np.uint16)), "the new lengths must change the output"


def test_unservable_arguments_raise_clearly():
    require_testdata()
    case, folder = [p.values for p in flashmla_cases() if p.values[0]["op"] == "sparse_decode"][0]
    d = load_case(folder)
    with pytest.raises(TypeError, match="not_a_flashmla_argument"):
        flash_mla_with_kvcache(d["q"], d["kv_cache"], None, None, D_C, None, None, softmax_scale=0.1,
                               is_fp8_kvcache=True, indices=d["indices"], not_a_flashmla_argument=1)
    with pytest.raises(ValueError, match="causal=True"):
        flash_mla_with_kvcache(d["q"], d["kv_cache"], None, None, D_C, None, None, softmax_scale=0.1,
                               is_fp8_kvcache=True, indices=d["indices"], causal=True)
    with pytest.raises(TypeError, match="tile_scheduler_metadata"):
        flash_mla_with_kvcache(d["q"], d["kv_cache"], None, None, D_C, np.zeros((1, 8), np.int32), None,
                               softmax_scale=0.1, is_fp8_kvcache=True, indices=d["indices"])
    two_heads = np.concatenate([d["kv_cache"], d["kv_cache"]], axis=2)
    with pytest.raises(ValueError, match="KV heads"):
        flash_mla_with_kvcache(d["q"], two_heads, None, None, D_C, None, None, softmax_scale=0.1,
                               is_fp8_kvcache=True, indices=d["indices"])


def test_indices_past_the_cache_count_as_invalid():
    """FlashMLA: -1 or >= total rows is invalid; the compat layer maps the latter to -1."""
    require_testdata()
    case, folder = [p.values for p in flashmla_cases() if p.values[0]["op"] == "sparse_decode"][0]
    d = load_case(folder)
    total = d["kv_cache"].shape[0] * d["kv_cache"].shape[1]
    past = np.where(d["indices"] < 0, total + 7, d["indices"]).astype(np.int32)
    kwargs = dict(softmax_scale=case["softmax_scale"], is_fp8_kvcache=True)
    out_a, lse_a = flash_mla_with_kvcache(d["q"], d["kv_cache"], None, None, D_C, None, None, indices=d["indices"], **kwargs)
    out_b, lse_b = flash_mla_with_kvcache(d["q"], d["kv_cache"], None, None, D_C, None, None, indices=past, **kwargs)
    np.testing.assert_array_equal(out_a.view(np.uint16), out_b.view(np.uint16))
    np.testing.assert_array_equal(lse_a, lse_b)
