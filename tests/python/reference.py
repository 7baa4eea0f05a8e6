"""Independent float64 numpy implementations of docs/spec.md, written from the spec (not from the C++
reference), so that the Python tests check the bindings end to end against a second definition."""

from __future__ import annotations

import numpy as np


def f64(x):
    return np.asarray(x).astype(np.float64)


def paged_rows(cache_f64, block_table_row, length, page_size):
    """Rows 0..length-1 of one request from a [num_pages, P, d] element cache."""
    t = np.arange(length)
    return cache_f64[block_table_row[t // page_size], t % page_size]


def attention(q, keys, values, tau, visible):
    """q [h, d], keys [n, d], values [n, d_v], visible [n] bool -> out [h, d_v], lse [h]."""
    h = q.shape[0]
    if not visible.any():
        return np.zeros((h, values.shape[1])), np.full(h, -np.inf)
    s = tau * q @ keys[visible].T
    m = s.max(axis=1, keepdims=True)
    p = np.exp(s - m)
    denom = p.sum(axis=1, keepdims=True)
    return (p / denom) @ values[visible], (m + np.log(denom))[:, 0]


def decode(q, cache, block_table, seq_lens, tau, causal, d_c):
    """docs/spec.md section 1. q [b, s_q, h_q, d_qk]; cache [num_pages, P, d_qk] elements."""
    q = f64(q)
    cache = f64(cache)
    b, s_q, h_q, _ = q.shape
    page_size = cache.shape[1]
    out = np.zeros((b, s_q, h_q, d_c))
    lse = np.zeros((b, s_q, h_q))
    for r in range(b):
        length = int(seq_lens[r])
        rows = paged_rows(cache, block_table[r], length, page_size)
        for i in range(s_q):
            limit = length - s_q + i + 1 if causal else length
            visible = np.arange(length) < limit
            out[r, i], lse[r, i] = attention(q[r, i], rows, rows[:, :d_c], tau, visible)
    return out, lse


def merge(parts_out, parts_lse):
    """docs/spec.md section 6: parts_out [n, rows, d], parts_lse [n, rows]."""
    o = f64(parts_out)
    ls = f64(parts_lse)
    m = ls.max(axis=0)
    m = np.where(np.isneginf(m), 0.0, m)
    total = np.exp(ls - m).sum(axis=0)
    with np.errstate(divide="ignore"):
        lse = m + np.log(total)
    w = np.where(np.isneginf(lse), 0.0, np.exp(ls - np.where(np.isneginf(lse), 0.0, lse)))
    return (w[..., None] * o).sum(axis=0), lse


def rope(x, positions, cos_sin, style):
    """docs/spec.md section 7: x [T, H, d_r] rotated by the table rows of `positions`."""
    x = f64(x)
    half = x.shape[-1] // 2
    cos = f64(cos_sin)[positions, :half][:, None, :]
    sin = f64(cos_sin)[positions, half:][:, None, :]
    if style == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., :half], x[..., half:]
    ya, yb = a * cos - b * sin, a * sin + b * cos
    y = np.empty_like(x)
    if style == "interleaved":
        y[..., 0::2], y[..., 1::2] = ya, yb
    else:
        y[..., :half], y[..., half:] = ya, yb
    return y


def prefill(q, k, v, cu_q, cu_k, tau, causal):
    """docs/spec.md section 3: ragged MHA, bottom-right causal."""
    q, k, v = f64(q), f64(k), f64(v)
    t_q, h_q, _ = q.shape
    out = np.zeros((t_q, h_q, v.shape[2]))
    lse = np.zeros((t_q, h_q))
    for r in range(len(cu_q) - 1):
        lq, lk = cu_q[r + 1] - cu_q[r], cu_k[r + 1] - cu_k[r]
        for i in range(lq):
            visible = np.arange(lk) <= i + lk - lq if causal else np.ones(lk, bool)
            for h in range(h_q):
                o, l = attention(q[cu_q[r] + i, h][None], k[cu_k[r] : cu_k[r + 1], h], v[cu_k[r] : cu_k[r + 1], h], tau, visible)
                out[cu_q[r] + i, h], lse[cu_q[r] + i, h] = o[0], l[0]
    return out, lse
