"""mlakit.compat.flashinfer: FlashInfer's BatchMLAPagedAttentionWrapper (plan / run, CSR page lists, split
ckv / kpe caches, base-2 LSE) against the float64 numpy reference of docs/spec.md section 1, on the CPU with numpy
arrays and on CUDA with torch tensors (eager and CUDA-graph replay)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mlakit
import mlakit._arrays
import reference
from conftest import BF16, assert_close, assert_lse_close, bf16_tolerance
from mlakit.compat.flashinfer import BatchMLAPagedAttentionWrapper

D_C, D_R = 512, 64
TAU = 0.13523378


def make_step(rng, lengths, s_q, h, page_size, spare_pages=3):
    """One decode step in FlashInfer's layout: a joined [num_pages, P, 576] bf16 cache, page lists in CSR
    (kv_indptr / kv_indices, pages drawn from a shuffled pool, unused pages NaN), kv_len_arr, q split in two."""
    b = len(lengths)
    pages_of = [-(-n // page_size) for n in lengths]
    num_pages = sum(pages_of) + spare_pages
    cache = rng.uniform(-1, 1, (num_pages, page_size, D_C + D_R)).astype(BF16)
    pool = rng.permutation(num_pages)
    kv_indptr = np.concatenate([[0], np.cumsum(pages_of)]).astype(np.int32)
    kv_indices = pool[: kv_indptr[-1]].astype(np.int32)
    used = np.zeros(num_pages, bool)
    used[kv_indices] = True
    cache[~used] = np.nan  # a page no list names is never read
    q = rng.uniform(-1, 1, (b * s_q, h, D_C + D_R)).astype(BF16)
    return {
        "cache": cache,
        "qo_indptr": (np.arange(b + 1) * s_q).astype(np.int32),
        "kv_indptr": kv_indptr,
        "kv_indices": kv_indices,
        "kv_len_arr": np.asarray(lengths, np.int32),
        "q_nope": np.ascontiguousarray(q[..., :D_C]),
        "q_pe": np.ascontiguousarray(q[..., D_C:]),
        "s_q": s_q,
        "page_size": page_size,
    }


def expected(step, causal, tau=TAU):
    """reference.decode over the same rows, with the CSR page lists as a 2-D block table."""
    b = step["kv_len_arr"].shape[0]
    s_q = step["s_q"]
    widest = max(1, int(np.diff(step["kv_indptr"]).max()))
    table = np.zeros((b, widest), np.int32)
    for i in range(b):
        pages = step["kv_indices"][step["kv_indptr"][i] : step["kv_indptr"][i + 1]]
        table[i, : len(pages)] = pages
    q = np.concatenate([step["q_nope"], step["q_pe"]], -1)
    h = q.shape[1]
    out, lse = reference.decode(q.reshape(b, s_q, h, -1), step["cache"], table, step["kv_len_arr"], tau, causal, D_C)
    vmax = np.zeros((b, s_q, h, 1))
    for i in range(b):
        n = int(step["kv_len_arr"][i])
        rows = reference.paged_rows(reference.f64(step["cache"]), table[i], n, step["page_size"])
        vmax[i] = np.abs(rows[:, :D_C]).max() if n else 0.0
    return out.reshape(b * s_q, h, D_C), lse.reshape(b * s_q, h), vmax.reshape(b * s_q, h, 1)


def plan(wrapper, step, h, causal, put=lambda x: x):
    wrapper.plan(put(step["qo_indptr"]), put(step["kv_indptr"]), put(step["kv_indices"]), put(step["kv_len_arr"]),
                 h, D_C, D_R, step["page_size"], causal, TAU, None, None)


def caches(step, joined, put=lambda x: x):
    cache = put(step["cache"])
    if joined:  # two column slices of one array: the layout engines allocate
        return cache[..., :D_C], cache[..., D_C:]
    return put(np.ascontiguousarray(step["cache"][..., :D_C])), put(np.ascontiguousarray(step["cache"][..., D_C:]))


def check(out, lse, want, base_e):
    ref_out, ref_lse, vmax = want
    assert_close(np.asarray(out).astype(np.float64), ref_out, bf16_tolerance(ref_out, vmax), "out")
    assert_lse_close(np.asarray(lse), ref_lse if base_e else ref_lse / math.log(2.0))


@pytest.mark.parametrize("s_q,causal", [(1, False), (2, True), (3, False)])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("joined", [False, True], ids=["split", "joined"])
def test_run_matches_the_reference_on_cpu(rng, s_q, causal, page_size, joined):
    step = make_step(rng, [0, 37, 2, 70], s_q, h=3, page_size=page_size)
    wrapper = BatchMLAPagedAttentionWrapper(np.zeros(1 << 16, np.int8))
    plan(wrapper, step, 3, causal)
    ckv, kpe = caches(step, joined)
    for base_e in (False, True):  # twice: the second run reuses the plan
        out, lse = wrapper.run(step["q_nope"], step["q_pe"], ckv, kpe, return_lse=True, return_lse_base_on_e=base_e)
        check(out, lse, expected(step, causal), base_e)
    assert wrapper.mlakit_backend == "reference"


def test_outputs_are_written_in_place_and_lse_is_optional(rng):
    step = make_step(rng, [5, 64], 1, h=2, page_size=16)
    wrapper = BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8))
    plan(wrapper, step, 2, False)
    ckv, kpe = caches(step, False)
    out = np.full((2, 2, D_C), np.nan, BF16)
    lse = np.full((2, 2), np.nan, np.float32)
    got_out, got_lse = wrapper.run(step["q_nope"], step["q_pe"], ckv, kpe, out=out, lse=lse, return_lse=True)
    assert got_out is out and got_lse is lse
    check(out, lse, expected(step, False), base_e=False)
    only_out = wrapper.run(step["q_nope"], step["q_pe"], ckv, kpe)
    assert not isinstance(only_out, tuple)
    assert np.array_equal(only_out.view(np.uint16), out.view(np.uint16))


def test_outputs_of_another_shape_are_refused(rng):
    """An out or lse with as many elements but another shape would be filled in [rows, h] order and read back in its
    own: refused, as FlashInfer refuses it."""
    step = make_step(rng, [5, 64, 9], 1, h=2, page_size=16)
    wrapper = BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8))
    plan(wrapper, step, 2, False)
    ckv, kpe = caches(step, False)
    with pytest.raises(ValueError, match=r"out: shape \(2, 3, 512\), must be \(3, 2, 512\)"):
        wrapper.run(step["q_nope"], step["q_pe"], ckv, kpe, out=np.empty((2, 3, D_C), BF16))
    with pytest.raises(ValueError, match=r"lse: shape \(6,\), must be \(3, 2\)"):
        wrapper.run(step["q_nope"], step["q_pe"], ckv, kpe, lse=np.empty(6, np.float32), return_lse=True)


def test_a_new_plan_is_used_by_the_next_run(rng):
    wrapper = BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8))
    for lengths in ([3, 40], [90, 1]):
        step = make_step(rng, lengths, 1, h=2, page_size=16)
        plan(wrapper, step, 2, False)
        ckv, kpe = caches(step, True)
        out, lse = wrapper.run(step["q_nope"], step["q_pe"], ckv, kpe, return_lse=True)
        check(out, lse, expected(step, False), base_e=False)


def test_a_new_page_size_in_plan_is_used(rng):
    """The same q shape and page count with another page size: a new internal plan, not the old one refusing it."""
    wrapper = BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8))
    for page_size, spare in ((16, 3), (32, 4)):  # 7 pages either way
        step = make_step(rng, [40, 9], 1, h=2, page_size=page_size, spare_pages=spare)
        assert step["cache"].shape[0] == 7
        plan(wrapper, step, 2, False)
        out, lse = wrapper.run(step["q_nope"], step["q_pe"], *caches(step, False), return_lse=True)
        check(out, lse, expected(step, False), base_e=False)


def test_a_new_scale_or_mask_in_plan_is_used(rng):
    """plan() may change sm_scale and causal with the same shapes: run() must follow (as in FlashInfer)."""
    step = make_step(rng, [40, 9], 2, h=2, page_size=16)
    wrapper = BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8))
    ckv, kpe = caches(step, False)
    for causal, scale in ((False, TAU), (True, TAU), (True, 2 * TAU)):
        wrapper.plan(step["qo_indptr"], step["kv_indptr"], step["kv_indices"], step["kv_len_arr"], 2, D_C, D_R, 16,
                     causal, scale, None, None)
        out, lse = wrapper.run(step["q_nope"], step["q_pe"], ckv, kpe, return_lse=True)
        want = expected(step, causal, scale)
        check(out, lse, want, base_e=False)


def test_column_slices_of_one_array_are_read_as_one_cache(rng):
    cache = rng.uniform(-1, 1, (3, 4, D_C + D_R)).astype(BF16)
    joined = mlakit._arrays.joined_last_dim(cache[..., :D_C], cache[..., D_C:])
    assert joined is not None and joined.shape == cache.shape
    assert np.array_equal(np.asarray(joined).view(np.uint16), cache.view(np.uint16))
    apart = np.ascontiguousarray(cache[..., D_C:])
    assert mlakit._arrays.joined_last_dim(cache[..., :D_C], apart) is None
    assert mlakit._arrays.joined_last_dim(cache[..., D_C:], cache[..., :D_C]) is None  # the wrong order


def test_a_given_lse_is_written_even_without_return_lse(rng):
    step = make_step(rng, [7, 30], 1, h=2, page_size=16)
    wrapper = BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8))
    plan(wrapper, step, 2, False)
    lse = np.full((2, 2), np.nan, np.float32)
    out = wrapper.run(step["q_nope"], step["q_pe"], *caches(step, True), lse=lse)
    check(out, lse, expected(step, False), base_e=False)


def test_unserved_calls_raise_with_the_reason(rng):
    step = make_step(rng, [4, 4], 1, h=2, page_size=16)
    wrapper = BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8))
    with pytest.raises(ValueError, match="ragged query lengths"):
        wrapper.plan(np.array([0, 1, 3], np.int32), step["kv_indptr"], step["kv_indices"], step["kv_len_arr"],
                     2, D_C, D_R, 16, False, TAU, None, None)
    with pytest.raises(ValueError, match="run\\(\\) before plan\\(\\)"):
        wrapper.run(step["q_nope"], step["q_pe"], *caches(step, False))
    with pytest.raises(ValueError, match="cutlass"):
        BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8), backend="cutlass")
    with pytest.raises(ValueError, match="use_cuda_graph=True needs"):
        BatchMLAPagedAttentionWrapper(np.zeros(16, np.uint8), use_cuda_graph=True)
    plan(wrapper, step, 2, False)
    with pytest.raises(ValueError, match="q_nope: shape"):
        wrapper.run(step["q_nope"][:, :1], step["q_pe"][:, :1], *caches(step, False))
    with pytest.raises(ValueError, match="profiler"):
        wrapper.run(step["q_nope"], step["q_pe"], *caches(step, False), profiler_buffer=np.zeros(1))


def test_split_cache_of_a_packed_format_is_refused_by_validation(rng):
    """The split form holds element formats only: uint8 rows named fp8_ds_mla cannot be split (field named)."""
    pages = np.zeros((2, 4, 512), np.uint8)
    rope = np.zeros((2, 4, 128), np.uint8)
    cache = mlakit.KvCache(pages, "fp8_ds_mla", k_pe=rope)
    assert cache.split
    q = np.zeros((1, 1, 1, D_C + D_R), BF16)
    with pytest.raises(ValueError, match="kv.format=fp8_ds_mla: must be bf16, fp16 or fp8_e4m3"):
        mlakit.decode(q, cache, np.zeros((1, 1), np.int32), np.ones(1, np.int32), np.zeros((1, 1, 1, D_C), BF16),
                      softmax_scale=TAU)


# ---- CUDA (torch) ------------------------------------------------------------------------------------------------

try:
    import torch
except ImportError:  # CI: the CPU tests above still run
    torch = None
needs_cuda = pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="no torch or no CUDA device")


def to_cuda(x):
    if x.dtype == BF16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def to_numpy(x):
    if x.dtype == torch.bfloat16:
        return x.cpu().view(torch.int16).numpy().view(BF16)
    return x.cpu().numpy()


def sm90_serves_joined():
    return any(b.name == "cuda_sm90" and b.available for b in mlakit.backends())


@needs_cuda
@pytest.mark.parametrize("s_q,causal", [(1, False), (2, True)])
@pytest.mark.parametrize("page_size", [1, 64])
@pytest.mark.parametrize("joined", [False, True], ids=["split", "joined"])
def test_run_matches_the_reference_on_cuda(rng, s_q, causal, page_size, joined):
    h = 16 if s_q == 1 else 128
    step = make_step(rng, [0, 1, 300, 2049, 77], s_q, h=h, page_size=page_size)
    wrapper = BatchMLAPagedAttentionWrapper(torch.empty(128 << 20, dtype=torch.int8, device="cuda"))
    plan(wrapper, step, h, causal, put=to_cuda)
    ckv, kpe = caches(step, joined, put=to_cuda)
    out, lse = wrapper.run(to_cuda(step["q_nope"]), to_cuda(step["q_pe"]), ckv, kpe, return_lse=True)
    torch.cuda.synchronize()
    check(to_numpy(out), to_numpy(lse), expected(step, causal), base_e=False)
    # Two arrays can only be read by the portable path; one array split in two columns by any CUDA path.
    want = ("cuda_sm90" if sm90_serves_joined() else "cuda") if joined else "cuda"
    assert wrapper.mlakit_backend == want


def next_step(rng, step, lengths):
    """The next decode step over the same cache: new lengths, new page lists (any pages), new q."""
    page_size = step["page_size"]
    pages_of = [-(-n // page_size) for n in lengths]
    kv_indptr = np.concatenate([[0], np.cumsum(pages_of)]).astype(np.int32)
    q = rng.uniform(-1, 1, (len(lengths) * step["s_q"],) + step["q_nope"].shape[1:-1] + (D_C + D_R,)).astype(BF16)
    return {
        **step,
        "kv_indptr": kv_indptr,
        "kv_indices": rng.permutation(step["cache"].shape[0])[: kv_indptr[-1]].astype(np.int32),
        "kv_len_arr": np.asarray(lengths, np.int32),
        "q_nope": np.ascontiguousarray(q[..., :D_C]),
        "q_pe": np.ascontiguousarray(q[..., D_C:]),
    }


@needs_cuda
def test_cuda_graph_replays_with_the_next_steps_lengths(rng):
    b, h, page_size, capacity = 4, 16, 16, 64
    buffers = {
        "qo_indptr": torch.zeros(b + 1, dtype=torch.int32, device="cuda"),
        "kv_indptr": torch.zeros(b + 1, dtype=torch.int32, device="cuda"),
        "kv_indices": torch.zeros(capacity, dtype=torch.int32, device="cuda"),
        "kv_len_arr": torch.zeros(b, dtype=torch.int32, device="cuda"),
    }
    wrapper = BatchMLAPagedAttentionWrapper(torch.empty(128 << 20, dtype=torch.int8, device="cuda"),
                                            use_cuda_graph=True, **buffers)
    first = make_step(rng, [5, 100, 0, 33], 1, h=h, page_size=page_size, spare_pages=40)
    first["cache"] = rng.uniform(-1, 1, first["cache"].shape).astype(BF16)  # every page may be listed next step
    second = next_step(rng, first, [200, 1, 64, 7])
    cache = to_cuda(first["cache"])
    q_nope, q_pe = to_cuda(first["q_nope"]), to_cuda(first["q_pe"])
    out = torch.empty((b, h, D_C), dtype=torch.bfloat16, device="cuda")
    lse = torch.empty((b, h), dtype=torch.float32, device="cuda")
    ckv, kpe = cache[..., :D_C], cache[..., D_C:]

    plan(wrapper, first, h, False, put=to_cuda)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch asks
        wrapper.run(q_nope, q_pe, ckv, kpe, out=out, lse=lse, return_lse=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        wrapper.run(q_nope, q_pe, ckv, kpe, out=out, lse=lse, return_lse=True)
    for step in (first, second):
        plan(wrapper, step, h, False, put=to_cuda)
        q_nope.copy_(to_cuda(step["q_nope"]))
        q_pe.copy_(to_cuda(step["q_pe"]))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(to_numpy(out), to_numpy(lse), expected(step, False), base_e=False)
