"""mlakit.compat.flashmla.flash_mla_sparse_fwd (FlashMLA's sparse prefill) against a float64 numpy statement of
FlashMLA's tests/ref.py definitions: out with the attention sink, max_logits and lse without it, +inf / -inf /
zeros for a query with no valid key; V3.2 (d_qk 576) and V4 (d_qk = d_v = 512) geometries."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BF16, assert_close, assert_lse_close, bf16_tolerance

from mlakit.compat.flashmla import flash_mla_sparse_fwd


def reference(q, kv, indices, scale, d_v, sink, topk_length):
    q = q.astype(np.float64)
    kv = kv[:, 0, :].astype(np.float64)
    s_q, h_q, _ = q.shape
    idx = indices[:, 0, :].astype(np.int64).copy()
    if topk_length is not None:
        idx[np.arange(idx.shape[1])[None, :] >= topk_length[:, None]] = -1
    invalid = (idx < 0) | (idx >= kv.shape[0])
    k = kv[np.where(invalid, 0, idx)]  # [s_q, topk, d_qk]
    p = np.einsum("shd,std->sht", q, k) * scale
    p[np.broadcast_to(invalid[:, None, :], p.shape)] = -np.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        max_logits = p.max(axis=-1)
        m = np.where(np.isfinite(max_logits), max_logits, 0.0)
        lse = np.log(np.exp(p - m[..., None]).sum(-1)) + m
        lse_o = lse if sink is None else np.logaddexp(lse, sink.astype(np.float64)[None, :])
        w = np.exp(p - np.where(np.isfinite(lse_o), lse_o, np.inf)[..., None])
    out = np.einsum("sht,std->shd", np.nan_to_num(w), k[..., :d_v])
    return out, max_logits, np.where(lse == -np.inf, np.inf, lse)


def make_inputs(rng, d_qk, s_q, h_q, s_kv, topk):
    """q, kv, indices (20% -1, query 3 with no valid key, ids past the cache in query 5), topk_length, sinks with +inf
    and -inf heads, and the scale 1/sqrt(d_qk)."""
    q = rng.uniform(-1, 1, (s_q, h_q, d_qk)).astype(BF16)
    kv = rng.uniform(-1, 1, (s_kv, 1, d_qk)).astype(BF16)
    indices = rng.integers(0, s_kv, (s_q, 1, topk)).astype(np.int32)
    indices[rng.random(indices.shape) < 0.2] = -1
    indices[3] = -1  # a query with no valid key
    indices[5, 0, :7] = s_kv + 9  # ids past the cache count as invalid
    topk_length = rng.integers(0, topk + 1, s_q).astype(np.int32)
    sink = rng.uniform(-2, 2, h_q).astype(np.float32)
    sink[0], sink[1] = np.inf, -np.inf
    return q, kv, indices, topk_length, sink, d_qk**-0.5


@pytest.mark.parametrize("d_qk", [576, 512], ids=["v32", "v4"])
def test_sparse_prefill_matches_flashmlas_definitions(d_qk, rng):
    d_v = 512
    q, kv, indices, topk_length, sink, scale = make_inputs(rng, d_qk, s_q=37, h_q=16, s_kv=300, topk=64)
    out, max_logits, lse = flash_mla_sparse_fwd(q, kv, indices, scale, d_v, attn_sink=sink, topk_length=topk_length)
    ref_out, ref_max, ref_lse = reference(q, kv, indices, scale, d_v, sink, topk_length)
    assert out.dtype == BF16 and out.shape == (37, 16, d_v)
    assert max_logits.shape == lse.shape == (37, 16)
    assert_close(out, ref_out, bf16_tolerance(ref_out, 1.0), "out")
    assert_lse_close(lse, ref_lse, "lse")
    assert_lse_close(max_logits, ref_max, "max_logits")
    assert np.all(lse[3] == np.inf) and np.all(max_logits[3] == -np.inf) and np.all(out[3].astype(np.float32) == 0)


def test_sparse_prefill_rejects_more_than_one_kv_head():
    q = np.zeros((2, 4, 576), BF16)
    with pytest.raises(ValueError, match="one latent KV head"):
        flash_mla_sparse_fwd(q, np.zeros((8, 2, 576), BF16), np.zeros((2, 2, 4), np.int32), 0.04)


# ---- the same call on CUDA tensors: max_logits from the portable CUDA kernel (issue 9 item 5) ----
try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:  # the CPU test environment has no torch
    torch = None
    HAS_CUDA = False


def to_cuda(a: np.ndarray):
    if a.dtype == BF16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device (or no torch)")
@pytest.mark.parametrize("d_qk", [576, 512], ids=["v32", "v4"])
def test_sparse_prefill_on_cuda_tensors(d_qk, rng):
    d_v = 512
    q, kv, indices, topk_length, sink, scale = make_inputs(rng, d_qk, s_q=300, h_q=64, s_kv=1000, topk=128)
    out, max_logits, lse = flash_mla_sparse_fwd(to_cuda(q), to_cuda(kv), to_cuda(indices), scale, d_v,
                                                attn_sink=to_cuda(sink), topk_length=to_cuda(topk_length))
    torch.cuda.synchronize()
    assert out.is_cuda and max_logits.is_cuda and lse.is_cuda
    ref_out, ref_max, ref_lse = reference(q, kv, indices, scale, d_v, sink, topk_length)
    assert_close(out.float().cpu().numpy(), ref_out, bf16_tolerance(ref_out, 1.0), "out")
    assert_lse_close(lse.cpu().numpy(), ref_lse, "lse")
    assert_lse_close(max_logits.cpu().numpy(), ref_max, "max_logits")
    assert torch.all(lse[3] == float("inf")) and torch.all(max_logits[3] == float("-inf"))
