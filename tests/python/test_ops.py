"""Every operation of the native API on the CPU reference backend, with numpy arrays, against the
float64 implementations of reference.py (docs/spec.md section 10 tolerances, poisoned outputs, NaN-poisoned
unused cache rows, shuffled block tables)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import BF16, assert_close, assert_lse_close, bf16_tolerance, fp16_tolerance

import mlakit
import reference as ref

TAU = 0.13523378
DTYPES = {"bf16": (BF16, bf16_tolerance), "fp16": (np.float16, fp16_tolerance)}


def make_paged(rng, lengths, page_size, d_qk, dtype, spare_pages=2):
    """A NaN-poisoned cache [num_pages, P, d_qk] with the requests' rows written on shuffled pages."""
    pages_per = [-(-int(n) // page_size) for n in lengths]
    num_pages = sum(pages_per) + spare_pages
    cache = np.full((num_pages, page_size, d_qk), np.nan, dtype)
    order = rng.permutation(num_pages)
    block_table = np.full((len(lengths), max(max(pages_per), 1) + 1), -1, np.int32)
    used = 0
    for b, n in enumerate(lengths):
        block_table[b, : pages_per[b]] = order[used : used + pages_per[b]]
        used += pages_per[b]
        t = np.arange(n)
        cache[block_table[b, t // page_size], t % page_size] = rng.uniform(-1, 1, (n, d_qk)).astype(dtype)
    return cache, block_table


DECODE_PARAMS = list(
    itertools.product(["bf16", "fp16"], [1, 16, 64], [1, 3], [False, True], [(64, 16, 4), (512, 64, 2)])
)


@pytest.mark.parametrize("dtype,page_size,s_q,causal,geometry", DECODE_PARAMS)
def test_decode_matches_spec(rng, dtype, page_size, s_q, causal, geometry):
    d_c, d_r, h_q = geometry
    np_dtype, tolerance = DTYPES[dtype]
    lengths = [0, 1, page_size - 1 + s_q, page_size + 1, 2 * page_size + 3]
    lengths = [max(n, s_q) if n else 0 for n in lengths]
    cache, block_table = make_paged(rng, lengths, page_size, d_c + d_r, np_dtype)
    seq_lens = np.array(lengths, np.int32)
    b = len(lengths)
    q = rng.uniform(-1, 1, (b, s_q, h_q, d_c + d_r)).astype(np_dtype)
    out = np.full((b, s_q, h_q, d_c), np.nan, np_dtype)
    lse = np.full((b, s_q, h_q), np.nan, np.float32)
    kv = mlakit.KvCache(cache, d_c=d_c, d_r=d_r)
    mlakit.decode(q, kv, block_table, seq_lens, out, lse, softmax_scale=TAU, causal=causal)
    want_out, want_lse = ref.decode(q, cache, block_table, seq_lens, TAU, causal, d_c)
    vmax = np.array([np.abs(ref.paged_rows(ref.f64(cache), block_table[r], n, page_size)[:, :d_c]).max() if n else 0
                     for r, n in enumerate(lengths)])[:, None, None, None]
    assert_close(out, want_out, tolerance(want_out, vmax), "out")
    assert_lse_close(lse, want_lse)


def test_decode_plan_serves_every_layer_and_new_lengths(rng):
    page_size, d_c, d_r, h_q, layers = 16, 64, 16, 4, 3
    lengths = [5, 40, 17]
    caches, block_table = [], None
    for _ in range(layers):
        c, bt = make_paged(np.random.default_rng(7), lengths, page_size, d_c + d_r, BF16)
        caches.append(rng.uniform(-1, 1, c.shape).astype(BF16))  # same page layout, new values per layer
        block_table = bt
    seq_lens = np.array(lengths, np.int32)
    qs = [rng.uniform(-1, 1, (3, 1, h_q, d_c + d_r)).astype(BF16) for _ in range(layers)]
    out = np.empty((3, 1, h_q, d_c), BF16)
    lse = np.empty((3, 1, h_q), np.float32)
    kvs = [mlakit.KvCache(c, d_c=d_c, d_r=d_r) for c in caches]
    plan = mlakit.DecodePlan(qs[0], kvs[0], block_table, seq_lens, out, lse, softmax_scale=TAU)
    assert plan.backend == "reference" and plan.workspace_bytes >= 0
    with pytest.raises(ValueError, match="plan"):
        plan.run(qs[0], kvs[0], out, lse)
    for step_lengths in ([5, 40, 17], [6, 41, 0]):
        seq_lens[:] = step_lengths  # engine pattern: same array, new contents
        plan.plan()
        for layer in range(layers):
            got_out = np.full_like(out, np.nan)
            got_lse = np.full_like(lse, np.nan)
            plan.run(qs[layer], kvs[layer], got_out, got_lse)
            one_out = np.full_like(out, np.nan)
            one_lse = np.full_like(lse, np.nan)
            mlakit.decode(qs[layer], kvs[layer], block_table, seq_lens, one_out, one_lse, softmax_scale=TAU)
            np.testing.assert_array_equal(got_out.view(np.uint16), one_out.view(np.uint16))
            np.testing.assert_array_equal(got_lse, one_lse)
            want_out, want_lse = ref.decode(qs[layer], caches[layer], block_table, seq_lens, TAU, False, d_c)
            assert_close(got_out, want_out, bf16_tolerance(want_out, 1.0), "plan out")
            assert_lse_close(got_lse, want_lse)


def test_decode_plan_refuses_a_run_of_another_shape(rng):
    """plan() schedules the constructor's query rows and cache layout (a backend's partitions and tiles follow from
    them): a run with other heads, tokens, format or page size would read a schedule made for something else."""
    page_size, d_c, d_r = 16, 64, 16
    cache, block_table = make_paged(rng, [5, 40], page_size, d_c + d_r, BF16)
    seq_lens = np.array([5, 40], np.int32)
    q = rng.uniform(-1, 1, (2, 1, 4, d_c + d_r)).astype(BF16)
    out = np.empty((2, 1, 4, d_c), BF16)
    kv = mlakit.KvCache(cache, d_c=d_c, d_r=d_r)
    plan = mlakit.DecodePlan(q, kv, block_table, seq_lens, out, softmax_scale=TAU)
    plan.plan()
    with pytest.raises(ValueError, match=r"q.shape\[2\]=2: must equal the DecodePlan's h_q=4"):
        plan.run(q[:, :, :2], kv, out[:, :, :2])
    with pytest.raises(ValueError, match=r"q.shape\[1\]=2: must equal the DecodePlan's s_q=1"):
        plan.run(np.concatenate([q, q], 1), kv, np.concatenate([out, out], 1))
    fp16 = mlakit.KvCache(cache.astype(np.float16), d_c=d_c, d_r=d_r)
    with pytest.raises(ValueError, match="kv_cache.format=fp16: must equal the DecodePlan's format=bf16"):
        plan.run(q.astype(np.float16), fp16, out.astype(np.float16))
    plan.run(q, kv, out)  # the planned shape still runs


@pytest.mark.parametrize("dtype", ["float32", "bf16"])
@pytest.mark.parametrize("in_place", [False, True])
def test_merge_pair_and_merge(rng, dtype, in_place):
    np_dtype = BF16 if dtype == "bf16" else np.float32
    rows, d, n = 7, 32, 3
    parts_out = rng.uniform(-1, 1, (n, rows, d)).astype(np_dtype)
    parts_lse = rng.uniform(-3, 3, (n, rows)).astype(np.float32)
    parts_lse[:, 0] = -np.inf  # a row empty in every part
    parts_lse[1, 1] = -np.inf  # a row empty in one part
    want_out, want_lse = ref.merge(parts_out, parts_lse)
    tol = bf16_tolerance(want_out, 1.0) if dtype == "bf16" else 1e-6 + 1e-6 * np.abs(want_out)

    a_out, a_lse = parts_out[0].copy(), parts_lse[0].copy()
    out = a_out if in_place else np.full((rows, d), np.nan, np_dtype)
    lse = a_lse if in_place else np.full(rows, np.nan, np.float32)
    mlakit.merge_pair(a_out, a_lse, parts_out[1], parts_lse[1], out, lse)
    mlakit.merge_pair(out.copy(), lse.copy(), parts_out[2], parts_lse[2], out, lse)
    assert_close(out, want_out, 2 * tol, "merge_pair out")
    assert_lse_close(lse, want_lse, "merge_pair lse")

    stacked_out, stacked_lse = parts_out.copy(), parts_lse.copy()
    out = stacked_out[0] if in_place else np.full((rows, d), np.nan, np_dtype)
    lse = stacked_lse[0] if in_place else np.full(rows, np.nan, np.float32)
    mlakit.merge(stacked_out, stacked_lse, out, lse)
    assert_close(out, want_out, tol, "merge out")
    assert_lse_close(lse, want_lse, "merge lse")


@pytest.mark.parametrize("style", ["interleaved", "neox"])
def test_rope_in_place(rng, style):
    t, h, d_r, max_pos = 5, 3, 64, 100
    cos_sin = mlakit.yarn_cos_sin_table(max_pos)
    x = rng.uniform(-1, 1, (t, h, d_r)).astype(np.float32)
    positions = rng.integers(0, max_pos, t).astype(np.int64)
    want = ref.rope(x, positions, cos_sin, style)
    mlakit.rope(x, positions, cos_sin, style=style)
    assert_close(x, want, 1e-5 + 1e-5 * np.abs(want), "rope")


@pytest.mark.parametrize("fmt,dtype", [("bf16", BF16), ("fp16", np.float16)])
def test_append_kv_then_gather_kv_round_trips(rng, fmt, dtype):
    page_size, d_c, d_r, num_pages = 4, 32, 8, 6
    cache = np.full((num_pages, page_size, d_c + d_r), np.nan, dtype)
    lengths = [3, 6]
    block_table = np.array([[4, -1, -1], [1, 5, -1]], np.int32)
    slots, rows = [], []
    for b, n in enumerate(lengths):
        for t in range(n):
            slots.append(block_table[b, t // page_size] * page_size + t % page_size)
    slots.insert(2, -1)  # a padding token: skipped
    slot_mapping = np.array(slots, np.int64)
    kv_c = rng.uniform(-1, 1, (len(slots), d_c)).astype(dtype)
    k_pe = rng.uniform(-1, 1, (len(slots), d_r)).astype(dtype)
    kv = mlakit.KvCache(cache, d_c=d_c, d_r=d_r)
    assert kv.format == fmt and kv.row_bytes == 2 * (d_c + d_r)
    mlakit.append_kv(kv_c, k_pe, slot_mapping, kv)
    rows = np.concatenate([kv_c, k_pe], axis=1)[slot_mapping >= 0]
    seq_lens = np.array(lengths, np.int32)
    cu_out = np.array([0, 3, 9], np.int32)
    out = np.full((9, d_c + d_r), np.nan, BF16)
    mlakit.gather_kv(kv, block_table, seq_lens, cu_out, out)
    np.testing.assert_array_equal(out.astype(np.float32), rows.astype(BF16).astype(np.float32))


def test_append_kv_fused_rope_rotates_k_pe_and_q(rng):
    t, h_q, d_c, d_r, page_size = 3, 2, 32, 16, 8
    cos_sin = mlakit.yarn_cos_sin_table(50, d_r=d_r)
    cache = np.full((1, page_size, d_c + d_r), np.nan, BF16)
    kv_c = rng.uniform(-1, 1, (t, d_c)).astype(BF16)
    k_pe = rng.uniform(-1, 1, (t, d_r)).astype(BF16)
    k_pe_before = k_pe.copy()
    q = rng.uniform(-1, 1, (t, h_q, d_c + d_r)).astype(BF16)
    q_before = q.copy()
    positions = np.array([3, 17, 49], np.int64)
    mlakit.append_kv(kv_c, k_pe, np.arange(t, dtype=np.int64), mlakit.KvCache(cache, d_c=d_c, d_r=d_r),
                     positions=positions, cos_sin=cos_sin, q=q)
    np.testing.assert_array_equal(k_pe.view(np.uint16), k_pe_before.view(np.uint16))  # input untouched
    want_k = ref.rope(k_pe_before[:, None, :], positions, cos_sin, "interleaved")[:, 0]
    assert_close(cache[0, :t, d_c:], want_k, bf16_tolerance(want_k, 1.0), "rotated k_pe in the cache")
    np.testing.assert_array_equal(cache[0, :t, :d_c].view(np.uint16), kv_c.view(np.uint16))
    want_q = ref.rope(q_before[:, :, d_c:], positions, cos_sin, "interleaved")
    assert_close(q[:, :, d_c:], want_q, bf16_tolerance(want_q, 1.0), "rotated q_pe")
    np.testing.assert_array_equal(q[:, :, :d_c].view(np.uint16), q_before[:, :, :d_c].view(np.uint16))


@pytest.mark.parametrize("causal", [False, True])
def test_prefill_matches_spec(rng, causal):
    h_q, d_qk, d_vh = 2, 24, 16
    cu_q = np.array([0, 3, 3, 7], np.int32)
    cu_k = np.array([0, 5, 7, 11], np.int32)
    q = rng.uniform(-1, 1, (7, h_q, d_qk)).astype(BF16)
    k = rng.uniform(-1, 1, (11, h_q, d_qk)).astype(BF16)
    v = rng.uniform(-1, 1, (11, h_q, d_vh)).astype(BF16)
    out = np.full((7, h_q, d_vh), np.nan, BF16)
    lse = np.full((7, h_q), np.nan, np.float32)
    mlakit.prefill(q, k, v, cu_q, cu_k, out, lse, softmax_scale=0.3, causal=causal)
    want_out, want_lse = ref.prefill(q, k, v, cu_q, cu_k, 0.3, causal)
    assert_close(out, want_out, bf16_tolerance(want_out, 1.0), "prefill out")
    assert_lse_close(lse, want_lse)


def test_sparse_decode_with_sink_and_topk_length(rng):
    page_size, d_c, d_r, h_q, topk = 8, 32, 8, 3, 6
    cache = rng.uniform(-1, 1, (4, page_size, d_c + d_r)).astype(BF16)
    q = rng.uniform(-1, 1, (2, 1, h_q, d_c + d_r)).astype(BF16)
    indices = rng.integers(-1, 4 * page_size, (2, 1, topk)).astype(np.int32)
    topk_length = np.array([4, 0], np.int32)
    sink = np.array([0.5, -np.inf, np.inf], np.float32)
    out = np.full((2, 1, h_q, d_c), np.nan, BF16)
    lse = np.full((2, 1, h_q), np.nan, np.float32)
    mlakit.sparse_decode(q, mlakit.KvCache(cache, d_c=d_c, d_r=d_r), indices, out, lse, softmax_scale=TAU,
                         topk_length=topk_length, attn_sink=sink)
    rows = ref.f64(cache).reshape(-1, d_c + d_r)
    for b in range(2):
        cols = indices[b, 0, : topk_length[b]]
        keys = rows[cols[cols >= 0]]
        o, l = ref.attention(ref.f64(q[b, 0]), keys, keys[:, :d_c], TAU, np.ones(len(keys), bool))
        with np.errstate(over="ignore", invalid="ignore"):  # an empty row (lse=-inf) stays 0
            o = np.where(np.isneginf(l)[:, None], 0.0, o / (1 + np.exp(sink.astype(np.float64) - l))[:, None])
        assert_close(out[b, 0], o, bf16_tolerance(o, 1.0), f"sparse out b={b}")
        assert_lse_close(lse[b, 0], l)


def test_yarn_helpers():
    assert mlakit.yarn_softmax_scale() == pytest.approx(0.13523378, rel=1e-7)
    assert mlakit.yarn_softmax_scale(factor=1.0) == pytest.approx(192**-0.5)
    table = mlakit.yarn_cos_sin_table(10)
    assert table.dtype == np.float32 and table.shape == (10, 64)
    np.testing.assert_array_equal(table[0], np.r_[np.ones(32), np.zeros(32)].astype(np.float32))
    inv = np.array(mlakit.yarn_inv_freq())
    np.testing.assert_allclose(table[1, :32], np.cos(inv), rtol=1e-6)
    cfg = {"qk_rope_head_dim": 64, "rope_theta": 10000, "rope_scaling": {
        "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
        "mscale": 1.0, "mscale_all_dim": 1.0}}
    np.testing.assert_array_equal(mlakit.yarn_cos_sin_table(10, **mlakit.yarn_from_config(cfg)), table)
