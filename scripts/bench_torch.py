#!/usr/bin/env python3
"""Host and GPU time per call of MLAKit's torch custom ops, mlakit.compat.flashmla and mlakit.compat.flashinfer (issue 11
item 1), with a
breakdown of where a decode call's host time goes, and MLAKit's prefill against torch's cuDNN attention in the same
run (issue 10's anchor, timed the same way). Needs a CUDA device, torch and the mlakit package.

Host us: calls enqueued back to back without synchronisation, the median over 5 batches of 40 (the GPU synchronised
between batches, outside the measurement): the CPU an engine spends per eager call. GPU ms: median of --reps calls timed by CUDA events, the L2
flushed (256 MB written) before each. The prefill rows time MLAKit's op and cuDNN in turn, one call of each per
repetition (in the other order every other one), and take every shape's GPU times before any host-time loop: under a
long run of back-to-back calls the GPU reaches its power limit and lowers its clock, so a figure taken right after
another call's loop is slower by that much (on an H200, 10 - 14%; docs/performance.md, "Clocks under sustained load").
The shapes' timings still follow one another, so their absolute times are those of a GPU under sustained load; the
op-against-cuDNN ratios are the figures to compare. Prints a table; --json FILE writes every row.

    PYTHONPATH=<package> python3 scripts/bench_torch.py [--reps 20] [--json out.json] [--sections decode,sparse,prefill]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import mlakit
import mlakit.torch  # noqa: F401  (registers torch.ops.mlakit)
from mlakit.compat.flashinfer import BatchMLAPagedAttentionWrapper
from mlakit.compat.flashmla import flash_mla_with_kvcache, get_mla_metadata

TAU = 0.13523378
D_C, D_R, P = 512, 64, 64
# Host time: the median over HOST_BATCHES batches of HOST_CALLS calls each, the GPU drained between batches. Short
# batches keep the launch queue from filling behind a kernel longer than the call's host time (the host would then
# wait for the GPU, and the figure would be GPU time); the median drops a batch that a host hiccup slowed.
HOST_CALLS = 40
HOST_BATCHES = 5
_flush = None


def host_us(fn) -> float:
    fn()
    torch.cuda.synchronize()
    batches = []
    for _ in range(HOST_BATCHES):
        t0 = time.perf_counter()
        for _ in range(HOST_CALLS):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        batches.append((t1 - t0) / HOST_CALLS * 1e6)
    return statistics.median(batches)


def gpu_ms(fn, reps: int) -> float:
    return gpu_ms_alternating([fn], reps)[0]


def gpu_ms_alternating(fns, reps: int) -> list:
    """The median GPU time of each of `fns`, timed in turn within every repetition (each after an L2 flush; the order
    reversed every other repetition), so that all of them meet the same clock as the GPU warms up to its power limit.
    Each is called once untimed first."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for rep in range(reps):
        for i in range(len(fns)) if rep % 2 == 0 else reversed(range(len(fns))):
            _flush.zero_()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[i]()
            stop.record()
            torch.cuda.synchronize()
            times[i].append(start.elapsed_time(stop))
    return [statistics.median(t) for t in times]


def decode_inputs(b: int, length: int, h_q: int):
    pages = -(-length // P)
    cache = torch.rand((b * pages, P, D_C + D_R), device="cuda").mul_(2).sub_(1).bfloat16()
    block_table = torch.randperm(b * pages, device="cuda", dtype=torch.int32).view(b, pages)
    seq_lens = torch.full((b,), length, dtype=torch.int32, device="cuda")
    q = torch.rand((b, 1, h_q, D_C + D_R), device="cuda").mul_(2).sub_(1).bfloat16()
    return q, cache, block_table, seq_lens


def rows_decode(reps: int):
    rows = []
    for b, length, h_q in [(1, 131072, 16), (32, 4096, 16), (128, 4096, 16), (128, 4096, 128)]:
        q, cache, table, lens = decode_inputs(b, length, h_q)
        shape = f"decode b={b} L={length} h_q={h_q} bf16"
        op = lambda: torch.ops.mlakit.decode(q, cache, table, lens, TAU)  # noqa: E731
        rows.append((shape, "torch.ops.mlakit.decode", host_us(op), gpu_ms(op, reps)))
        # Where the host time goes: the native call with everything preallocated, and its pieces.
        out = torch.empty((b, 1, h_q, D_C), dtype=torch.bfloat16, device="cuda")
        lse = torch.empty((b, 1, h_q), dtype=torch.float32, device="cuda")
        kv = mlakit.KvCache(cache)
        nbytes = mlakit.decode_workspace_bytes(q, kv, table, lens, out, lse, softmax_scale=TAU)
        ws = torch.empty(max(nbytes, 1), dtype=torch.uint8, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        native = lambda: mlakit.decode(q, kv, table, lens, out, lse, softmax_scale=TAU, workspace=ws, stream=stream)  # noqa: E731
        rows.append((shape, "  mlakit.decode (native, preallocated)", host_us(native), gpu_ms(native, reps)))
        size = lambda: mlakit.decode_workspace_bytes(q, kv, table, lens, out, lse, softmax_scale=TAU)  # noqa: E731
        rows.append((shape, "  mlakit.decode_workspace_bytes alone", host_us(size), float("nan")))
        wrap = lambda: mlakit.KvCache(cache)  # noqa: E731
        rows.append((shape, "  mlakit.KvCache(tensor) alone", host_us(wrap), float("nan")))
        alloc = lambda: (torch.empty_like(out), torch.empty_like(lse), torch.empty_like(ws))  # noqa: E731
        rows.append((shape, "  3 x torch.empty (out, lse, workspace)", host_us(alloc), float("nan")))
        meta, splits = get_mla_metadata(lens, h_q, 1)
        flash = lambda: flash_mla_with_kvcache(q, cache.view(-1, P, 1, D_C + D_R), table, lens, D_C, meta, splits,  # noqa: E731
                                               softmax_scale=TAU)
        rows.append((shape, "mlakit.compat.flashmla", host_us(flash), gpu_ms(flash, reps)))
        rows += rows_flashinfer(shape, q, cache, table, lens, reps)
    return rows


def rows_flashinfer(shape, q, cache, table, lens, reps: int):
    """FlashInfer's wrapper over the same rows: CSR page lists, q in two parts, the cache as two column slices of one
    array (read as one joined cache) and as two separate arrays (a split cache: the portable path)."""
    b, _, h_q, _ = q.shape
    wrapper = BatchMLAPagedAttentionWrapper(torch.empty(128 << 20, dtype=torch.int8, device="cuda"))
    indptr = torch.arange(b + 1, dtype=torch.int32, device="cuda") * table.shape[1]
    wrapper.plan(torch.arange(b + 1, dtype=torch.int32), indptr, table.reshape(-1), lens, h_q, D_C, D_R, P, False,
                 TAU, torch.bfloat16, torch.bfloat16)
    q_nope, q_pe = q[:, 0, :, :D_C].contiguous(), q[:, 0, :, D_C:].contiguous()
    rows = []
    for label, ckv, kpe in (("one array", cache[..., :D_C], cache[..., D_C:]),
                            ("ckv, kpe apart", cache[..., :D_C].contiguous(), cache[..., D_C:].contiguous())):
        run = lambda: wrapper.run(q_nope, q_pe, ckv, kpe)  # noqa: E731
        gpu = gpu_ms(run, reps)
        rows.append((shape, f"mlakit.compat.flashinfer ({label}: {wrapper.mlakit_backend})", host_us(run), gpu))
    return rows


def rows_sparse_and_append(reps: int):
    rows = []
    b, s_q, h_q, topk, ctx = 128, 2, 128, 2048, 8192
    cache = torch.rand((b * ctx // P, P, D_C + D_R), device="cuda").mul_(2).sub_(1).bfloat16()
    base = (torch.arange(b, device="cuda") * ctx).view(b, 1, 1)
    ids = (torch.rand((b, s_q, ctx), device="cuda").argsort(-1)[..., :topk] + base).int()
    q = torch.rand((b, s_q, h_q, D_C + D_R), device="cuda").mul_(2).sub_(1).bfloat16()
    op = lambda: torch.ops.mlakit.sparse_decode(q, cache, ids, TAU)  # noqa: E731
    rows.append((f"sparse b={b} s_q={s_q} h_q={h_q} topk={topk} bf16", "torch.ops.mlakit.sparse_decode", host_us(op),
                 gpu_ms(op, reps)))
    t = 128
    kv_c = torch.rand((t, D_C), device="cuda").bfloat16()
    k_pe = torch.rand((t, D_R), device="cuda").bfloat16()
    slots = torch.randperm(cache.shape[0] * P, device="cuda")[:t]
    op = lambda: torch.ops.mlakit.append_kv(kv_c, k_pe, slots, cache)  # noqa: E731
    rows.append((f"append T={t} bf16", "torch.ops.mlakit.append_kv", host_us(op), gpu_ms(op, reps)))
    return rows


def prefill_case(b: int, s: int, h: int = 128, dqk: int = 192, dv: int = 128):
    """One prefill shape: (label, FLOPs, MLAKit's op, torch SDPA on the same pairs as a padded dense batch)."""
    q = torch.randn((b * s, h, dqk), device="cuda", dtype=torch.bfloat16)
    k = torch.randn((b * s, h, dqk), device="cuda", dtype=torch.bfloat16)
    v = torch.randn((b * s, h, dv), device="cuda", dtype=torch.bfloat16)
    cu = torch.arange(0, (b + 1) * s, s, device="cuda", dtype=torch.int32)
    scale = dqk**-0.5
    qd, kd, vd = (x.view(b, s, h, -1).transpose(1, 2) for x in (q, k, v))

    def op():
        return torch.ops.mlakit.prefill(q, k, v, cu, cu, scale, True)

    def sdpa():
        return F.scaled_dot_product_attention(qd, kd, vd, is_causal=True, scale=scale)

    return f"prefill {b} x {s} h={h} d={dqk}/{dv} causal", 2 * h * (dqk + dv) * b * s * (s + 1) / 2, op, sdpa


def rows_prefill(reps: int):
    """MLAKit's prefill op against torch SDPA with the cuDNN backend on the same padded-free shapes (one request per
    batch entry, all of equal length, so the dense padded batch attends exactly the same pairs), causal, h = 128."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cases = [prefill_case(b, s) for b, s in [(1, 16384), (4, 4096), (1, 4096), (64, 512)]]
    rows = []
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):  # around every SDPA call below, so no host loop pays for entering it
        try:
            cases[0][3]()
            cudnn_error = None
        except RuntimeError as e:  # cuDNN attention unavailable in this torch build
            cudnn_error = str(e).splitlines()[0][:60]
        # Every shape's GPU times first, then the host-time loops (module docstring: the power limit).
        times = [gpu_ms_alternating([op] if cudnn_error else [op, sdpa], reps) for _, _, op, sdpa in cases]
        for (shape, flops, op, sdpa), ms in zip(cases, times):
            rows.append((shape, f"torch.ops.mlakit.prefill ({flops / ms[0] * 1e-9:.1f} TFLOP/s)", host_us(op), ms[0]))
            if cudnn_error is not None:
                rows.append((shape, f"torch SDPA cuDNN: {cudnn_error}", float("nan"), float("nan")))
            else:
                rows.append((shape, f"torch SDPA cuDNN ({flops / ms[1] * 1e-9:.1f} TFLOP/s)", host_us(sdpa), ms[1]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--sections", default="decode,sparse,prefill", help="comma-separated: decode, sparse, prefill")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_torch.py needs a CUDA device")
    sections = {"decode": rows_decode, "sparse": rows_sparse_and_append, "prefill": rows_prefill}
    rows = [r for name in args.sections.split(",") for r in sections[name](args.reps)]
    print(f"\nmlakit {mlakit.__version__} + torch {torch.__version__} on {torch.cuda.get_device_name()}: host us per "
          f"eager call (median of {HOST_BATCHES} x {HOST_CALLS} calls, no sync), GPU ms (median of {args.reps}, L2 flushed)")
    print(f"{'shape':<40} {'call':<50} {'host us':>9} {'GPU ms':>9}")
    for shape, call, hus, ms in rows:
        print(f"{shape:<40} {call:<50} {hus:9.1f} {ms:9.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(shape=s, call=c, host_us=h, gpu_ms=g) for s, c, h, g in rows], f, indent=1)


if __name__ == "__main__":
    main()
