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


# ---- the same cases on CUDA tensors: the portable CUDA path serves V4 (fp8_ds_v4, whole-row V, extra cache) ----
try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:  # the CPU test environment has no torch
    torch = None
    HAS_CUDA = False

needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device (or no torch)")


def to_cuda(a: np.ndarray):
    """A CUDA tensor of `a` (bf16 arrays through their bits: torch does not read ml_dtypes)."""
    if a.dtype == BF16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def flash_view_cuda(pages: np.ndarray, page_size: int, row: int):
    """flash_view over a CUDA copy of the padded pages (no copy of the view itself)."""
    t = to_cuda(pages)
    return t.as_strided((pages.shape[0], page_size, 1, row), (pages.shape[1], row, row, 1))


def to_numpy(t):
    return t.float().cpu().numpy()


@needs_cuda
@pytest.mark.parametrize("case,folder", CASES)
def test_compat_reproduces_flashmla_sparse_on_cuda(case, folder):
    if case is None:
        pytest.skip("no golden vectors (tests/data/flashmla_sparse)")
    d = load_case(folder)
    row = token_bytes(case)
    opt = lambda k: to_cuda(d[k]) if k in d else None  # noqa: E731
    kwargs = {"softmax_scale": case["softmax_scale"], "is_fp8_kvcache": True, "indices": to_cuda(d["indices"]),
              "attn_sink": opt("attn_sink"), "topk_length": opt("topk_length")}
    if "extra_indices" in d:
        kwargs.update(extra_k_cache=flash_view_cuda(d["extra_kv_cache"], case["extra"]["page_size"], row),
                      extra_indices_in_kvcache=to_cuda(d["extra_indices"]), extra_topk_length=opt("extra_topk_length"))
    k_cache = flash_view_cuda(d["kv_cache"], case["page_size"], row)
    out, lse = flash_mla_with_kvcache(to_cuda(d["q"]), k_cache, None, None, D_V, None, None, **kwargs)
    torch.cuda.synchronize()
    assert out.is_cuda and out.dtype == torch.bfloat16 and tuple(out.shape) == d["out"].shape
    ref = d["out"].astype(np.float64)
    assert_close(to_numpy(out), ref, bf16_tolerance(ref, row_vmax(case, d)), f"{case['name']}: out")
    assert_lse_close(to_numpy(lse), d["lse"], f"{case['name']}: lse")


@needs_cuda
def test_v4_torch_op_with_extra_cache_is_graph_capturable():
    import mlakit.torch  # noqa: F401  (registers torch.ops.mlakit)

    cases = [p.values for p in CASES if p.values[0] and p.values[0].get("extra")]
    if not cases:
        pytest.skip("no V4 golden case with an extra cache")
    case, folder = cases[0]
    d = load_case(folder)
    # MLAKit's native layout: the packed [num_pages, P, 584] token view of each padded page buffer.
    main = flash_view_cuda(d["kv_cache"], case["page_size"], 584)[:, :, 0, :]
    extra = flash_view_cuda(d["extra_kv_cache"], case["extra"]["page_size"], 584)[:, :, 0, :]
    q, ids, extra_ids = to_cuda(d["q"]), to_cuda(d["indices"]), to_cuda(d["extra_indices"])
    args = dict(kv_format="fp8_ds_v4", d_c=448, v_whole_row=True, extra_kv_cache=extra, extra_indices=extra_ids,
                extra_topk_length=to_cuda(d["extra_topk_length"]) if "extra_topk_length" in d else None,
                topk_length=to_cuda(d["topk_length"]) if "topk_length" in d else None,
                attn_sink=to_cuda(d["attn_sink"]) if "attn_sink" in d else None)
    eager_out, eager_lse = torch.ops.mlakit.sparse_decode(q, main, ids, case["softmax_scale"], **args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture
        torch.ops.mlakit.sparse_decode(q, main, ids, case["softmax_scale"], **args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = torch.ops.mlakit.sparse_decode(q, main, ids, case["softmax_scale"], **args)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse)  # same kernels, same inputs: same bits
    ref = d["out"].astype(np.float64)
    assert_close(to_numpy(out), ref, bf16_tolerance(ref, row_vmax(case, d)), f"{case['name']}: graph out")
