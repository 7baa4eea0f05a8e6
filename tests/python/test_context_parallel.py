"""Context parallelism from Python (docs/spec.md section 11): decode's shard= argument, each rank's shard merged
with mlakit.merge against the unsharded decode (the numpy oracle of reference.py), DecodePlan with shard=, the
helpers, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BF16, assert_close, assert_lse_close, bf16_tolerance

import mlakit
import reference

TAU = 0.13523378
D_C, D_QK = 512, 576


def owner(t, world, interleave):
    return (t // interleave) % world


def local_index(t, world, interleave):
    return t // (interleave * world) * interleave + t % interleave


def shard_cache(cache, table, lens, world, rank, interleave, page_size):
    """Rank `rank`'s cache and block table: its tokens of each request at their local indices (pages in order)."""
    b = len(lens)
    owned = [sum(owner(t, world, interleave) == rank for t in range(n)) for n in lens]
    pages = [max(1, -(-n // page_size)) for n in owned]
    local = np.full((sum(pages), page_size, D_QK), np.nan, np.float32).astype(BF16)
    local_table = np.full((b, max(pages)), -1, np.int32)
    first = 0
    for r in range(b):
        local_table[r, : pages[r]] = np.arange(first, first + pages[r])
        first += pages[r]
        for t in range(lens[r]):
            if owner(t, world, interleave) == rank:
                k = local_index(t, world, interleave)
                local[local_table[r, k // page_size], k % page_size] = cache[table[r, t // page_size], t % page_size]
    return local, local_table


@pytest.mark.parametrize("world,interleave,s_q", [(2, 1, 1), (3, 1, 4), (2, 64, 4), (3, 2, 2)])
def test_rank_shards_merge_to_the_unsharded_decode(rng, world, interleave, s_q):
    lens = [0, 1, 2, 5, 70, 150]
    b, h_q, page_size = len(lens), 3, 16
    pages_per = max(-(-n // page_size) for n in lens)
    table = np.arange(b * pages_per, dtype=np.int32).reshape(b, pages_per)
    cache = rng.uniform(-1, 1, (b * pages_per, page_size, D_QK)).astype(BF16)
    q = rng.uniform(-1, 1, (b, s_q, h_q, D_QK)).astype(BF16)
    seq_lens = np.array(lens, np.int32)
    causal = s_q > 1
    parts_out = np.full((world, b * s_q * h_q, D_C), np.nan, np.float32).astype(BF16)
    parts_lse = np.full((world, b * s_q * h_q), np.nan, np.float32)
    for rank in range(world):
        local, local_table = shard_cache(cache, table, lens, world, rank, interleave, page_size)
        out = parts_out[rank].reshape(b, s_q, h_q, D_C)
        lse = parts_lse[rank].reshape(b, s_q, h_q)
        mlakit.decode(q, local, local_table, seq_lens, out, lse, softmax_scale=TAU, causal=causal,
                      shard=(world, rank, interleave))
    out = np.full((b * s_q * h_q, D_C), np.nan, np.float32).astype(BF16)
    lse = np.full(b * s_q * h_q, np.nan, np.float32)
    mlakit.merge(parts_out, parts_lse, out, lse)
    ref_out, ref_lse = reference.decode(q, cache, table, seq_lens, TAU, causal, D_C)
    vmax = np.abs(reference.f64(cache)[..., :D_C]).max()
    ref_out = ref_out.reshape(-1, D_C)
    assert_close(out, ref_out, bf16_tolerance(ref_out, vmax), "merged out")
    assert_lse_close(lse, ref_lse.reshape(-1))


def test_decode_plan_takes_the_shard(rng):
    lens = [3, 40]
    world, rank, page_size = 2, 1, 16
    table = np.arange(6, dtype=np.int32).reshape(2, 3)
    cache = rng.uniform(-1, 1, (6, page_size, D_QK)).astype(BF16)
    local, local_table = shard_cache(cache, table, lens, world, rank, 1, page_size)
    q = rng.uniform(-1, 1, (2, 1, 4, D_QK)).astype(BF16)
    seq_lens = np.array(lens, np.int32)
    direct = np.zeros((2, 1, 4, D_C), BF16)
    mlakit.decode(q, local, local_table, seq_lens, direct, softmax_scale=TAU, shard=(world, rank))
    planned = np.zeros_like(direct)
    plan = mlakit.DecodePlan(q, local, local_table, seq_lens, planned, softmax_scale=TAU, shard=(world, rank))
    plan.plan()
    plan.run(q, local, planned)
    np.testing.assert_array_equal(planned.view(np.uint16), direct.view(np.uint16))
    assert not np.all(direct.view(np.uint16) == 0)


def test_helpers_on_host_arrays():
    local = np.full(4, -7, np.int32)
    mlakit.shard_seq_lens(np.array([0, 1, 65, 200], np.int32), local, shard=(3, 2, 64))
    np.testing.assert_array_equal(local, [0, 0, 0, 64])  # rank 2 of 3 holds tokens 128..191 of each 192
    slots = np.full(7, 99, np.int64)
    table = np.array([[10, 11, 12, -1], [20, 21, 22, 23], [30, -1, 31, 32]], np.int32)
    mlakit.shard_slot_mapping(np.array([7, 8, 0, 1, -1, 3, 4], np.int64), np.array([0, 2, 2, 5], np.int32), table,
                              slots, shard=(2, 1), page_size=2)
    np.testing.assert_array_equal(slots, [23, -1, -1, 60, -1, -1, -1])


@pytest.mark.parametrize(
    "shard,error,pattern",
    [
        ((2, 2), ValueError, r"shard.rank=2: must be in \[0, 1\]"),
        ((0, 0, 1), ValueError, r"shard.world=0"),
        ((2, 0, 0), ValueError, r"shard.interleave=0"),
        ((2,), ValueError, r"shard: must be None or a tuple"),
        ("2,0", ValueError, r"shard: must be None or a tuple"),
    ],
)
def test_bad_shards_are_named(shard, error, pattern):
    args = dict(q=np.zeros((1, 1, 4, D_QK), BF16), kv_cache=np.zeros((2, 16, D_QK), BF16),
                block_table=np.zeros((1, 2), np.int32), seq_lens=np.ones(1, np.int32),
                out=np.zeros((1, 1, 4, D_C), BF16))
    with pytest.raises(error, match=pattern):
        mlakit.decode(**args, softmax_scale=TAU, shard=shard)
