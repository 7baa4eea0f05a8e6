"""FlashMLA's sparse golden cases for DeepSeek V4 and V3.2 (tests/data/flashmla_sparse) through
mlakit.compat.flashmla unchanged: V4's paged fp8_ds_v4 caches as FlashMLA's [num_blocks, block_size, 1, 584]
views over padded pages, the extra cache, sinks, topk_length; V3.2 caches with odd page sizes and padded pages."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BF16, FP8, assert_close, assert_lse_close, bf16_tolerance, flashmla_cases, load_case

from mlakit.compat.flashmla import flash_mla_with_kvcache

D_V = 512
CASES = flashmla_cases("flashmla_sparse") or [pytest.param(None, None, id="no-testdata")]


def token_bytes(case: dict) -> int:
    return 584 if case["layout"] == "model1" else 656


def flash_view(pages: np.ndarray, page_size: int, row: int) -> np.ndarray:
    """FlashMLA's [num_blocks, block_size, 1, row] view over [num_pages, page_bytes] padded pages (no copy)."""
    num_pages, page_bytes = pages.shape
    return np.lib.stride_tricks.as_strided(pages, (num_pages, page_size, 1, row), (page_bytes, row, row, 1))


def dequant(pages: np.ndarray, page_size: int, v4: bool) -> np.ndarray:
    """Every token of a cache as float32 [num_pages * page_size, 512], from docs/spec.md section 4's layouts."""
    num_pages = pages.shape[0]
    if v4:  # per page: P blocks of (448 e4m3, 64 bf16), then P blocks of (7 UE8M0 exponents, 1 unused)
        blocks = pages[:, : page_size * 576].reshape(num_pages, page_size, 576)
        exps = pages[:, page_size * 576 : page_size * 584].reshape(num_pages, page_size, 8)[..., :7]
        scale = np.exp2(exps.astype(np.float32) - 127)
        latent = blocks[..., :448].view(FP8).astype(np.float32) * np.repeat(scale, 64, axis=-1)
        rope = blocks[..., 448:].copy().view(BF16).astype(np.float32)
    else:  # P rows of 656 bytes: 512 e4m3, 4 float32 scales, 64 bf16
        rows = pages[:, : page_size * 656].reshape(num_pages, page_size, 656)
        scale = rows[..., 512:528].copy().view(np.float32)
        latent = rows[..., :512].view(FP8).astype(np.float32) * np.repeat(scale, 128, axis=-1)
        rope = rows[..., 528:].copy().view(BF16).astype(np.float32)
    return np.concatenate([latent, rope], axis=-1).reshape(num_pages * page_size, -1)[:, :D_V]


def row_vmax(case: dict, d: dict) -> np.ndarray:
    """Per (b, s): the largest |V| over the valid ids of both sets, shape [b, s_q, 1, 1]."""
    v4 = case["layout"] == "model1"
    sets = [(dequant(d["kv_cache"], case["page_size"], v4), d["indices"], d.get("topk_length"))]
    if "extra_indices" in d:
        extra = dequant(d["extra_kv_cache"], case["extra"]["page_size"], v4)
        sets.append((extra, d["extra_indices"], d.get("extra_topk_length")))
    b, s_q = d["indices"].shape[:2]
    vmax = np.zeros((b, s_q))
    for kv, idx, lengths in sets:
        for bi in range(b):
            used = idx.shape[2] if lengths is None else int(np.clip(lengths[bi], 0, idx.shape[2]))
            for s in range(s_q):
                ids = idx[bi, s, :used]
                ids = ids[(ids >= 0) & (ids < kv.shape[0])]
                if ids.size:
                    vmax[bi, s] = max(vmax[bi, s], np.abs(kv[ids]).max())
    return vmax[:, :, None, None]


@pytest.mark.parametrize("case,folder", CASES)
def test_compat_reproduces_flashmla_sparse(case, folder):
    if case is None:
        pytest.skip("no golden vectors (tests/data/flashmla_sparse)")
    d = load_case(folder)
    row = token_bytes(case)
    kwargs = {
        "softmax_scale": case["softmax_scale"],
        "is_fp8_kvcache": True,
        "indices": d["indices"],
        "attn_sink": d.get("attn_sink"),
        "topk_length": d.get("topk_length"),
    }
    if "extra_indices" in d:
        kwargs.update(
            extra_k_cache=flash_view(d["extra_kv_cache"], case["extra"]["page_size"], row),
            extra_indices_in_kvcache=d["extra_indices"],
            extra_topk_length=d.get("extra_topk_length"),
        )
    k_cache = flash_view(d["kv_cache"], case["page_size"], row)
    out, lse = flash_mla_with_kvcache(d["q"], k_cache, None, None, D_V, None, None, **kwargs)
    assert out.dtype == BF16 and out.shape == d["out"].shape
    ref = d["out"].astype(np.float64)
    assert_close(out, ref, bf16_tolerance(ref, row_vmax(case, d)), f"{case['name']}: out")
    assert_lse_close(lse, d["lse"], f"{case['name']}: lse")


def test_extra_cache_needs_indices_and_both_arrays():
    cases = [p.values for p in flashmla_cases("flashmla_sparse") if "extra" in p.values[0] and p.values[0]["extra"]]
    if not cases:
        pytest.skip("no golden vectors (tests/data/flashmla_sparse)")
    case, folder = cases[0]
    d = load_case(folder)
    k_cache = flash_view(d["kv_cache"], case["page_size"], 584)
    extra = flash_view(d["extra_kv_cache"], case["extra"]["page_size"], 584)
    with pytest.raises(ValueError, match="sparse mode only"):
        flash_mla_with_kvcache(d["q"], k_cache, None, None, D_V, None, None, softmax_scale=0.1,
                               is_fp8_kvcache=True, extra_k_cache=extra, extra_indices_in_kvcache=d["extra_indices"])
    with pytest.raises(ValueError, match="needs both"):
        flash_mla_with_kvcache(d["q"], k_cache, None, None, D_V, None, None, softmax_scale=0.1,
                               is_fp8_kvcache=True, indices=d["indices"], extra_k_cache=extra)
