"""Context-parallel decode from Python with torch.distributed (docs/spec.md section 11).

Every rank holds its share of each request's tokens, decodes over them with mlakit.decode(shard=...), the partial
(out, lse) are all-gathered with NCCL through torch.distributed, and mlakit.merge combines them. Rank 0 then checks
the result against an unsharded decode of the same global problem on its own GPU.

    python -m torch.distributed.run --nproc-per-node 2 examples/context_parallel_decode.py

The GPU machines of this project need NVLink multicast off; the variables are set before NCCL starts.
"""

from __future__ import annotations

import os

for var, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[var] = value

import torch
import torch.distributed as dist

import mlakit

D_C, D_QK, TAU = 512, 576, 0.13523378


def owner(t: torch.Tensor, world: int, interleave: int) -> torch.Tensor:
    return (t // interleave) % world


def local_index(t: torch.Tensor, world: int, interleave: int) -> torch.Tensor:
    return t // (interleave * world) * interleave + t % interleave


def shard_of(cache, table, lens, world, rank, interleave, page_size):
    """This rank's cache (its tokens at their local indices, pages in order) and block table."""
    owned = [int((owner(torch.arange(n), world, interleave) == rank).sum()) for n in lens]
    pages = [max(1, -(-n // page_size)) for n in owned]
    local = torch.zeros(sum(pages), page_size, D_QK, dtype=cache.dtype)
    local_table = torch.full((len(lens), max(pages)), -1, dtype=torch.int32)
    first = 0
    for r, n in enumerate(lens):
        local_table[r, : pages[r]] = torch.arange(first, first + pages[r], dtype=torch.int32)
        first += pages[r]
        t = torch.arange(n)
        t = t[owner(t, world, interleave) == rank]
        k = local_index(t, world, interleave)
        local[local_table[r, k // page_size].long(), k % page_size] = cache[table[r, t // page_size].long(), t % page_size]
    return local, local_table


def main() -> None:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)

    # The same global problem on every rank (same seed): 4 requests, 2 new tokens each (causal), 16 heads.
    lens, s_q, h_q, page_size, interleave = [0, 1, 1000, 4097], 2, 16, 64, 1
    gen = torch.Generator().manual_seed(0)
    pages_per = max(-(-n // page_size) for n in lens)
    table = torch.randperm(len(lens) * pages_per, generator=gen).to(torch.int32).view(len(lens), pages_per)
    cache = (torch.rand(len(lens) * pages_per, page_size, D_QK, generator=gen) * 2 - 1).to(torch.bfloat16)
    q = ((torch.rand(len(lens), s_q, h_q, D_QK, generator=gen) * 2 - 1).to(torch.bfloat16)).to(dev)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    rows = len(lens) * s_q * h_q

    # This rank's share, decoded into its partial (out, lse).
    local, local_table = shard_of(cache, table, lens, world, rank, interleave, page_size)
    out = torch.empty(len(lens), s_q, h_q, D_C, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(len(lens), s_q, h_q, dtype=torch.float32, device=dev)
    mlakit.decode(q, local.to(dev), local_table.to(dev), seq_lens, out, lse, softmax_scale=TAU, causal=True,
                  shard=(world, rank, interleave))

    # The exchange (NCCL through torch.distributed) and the merge (docs/spec.md section 6).
    parts_out = torch.empty(world, rows, D_C, dtype=torch.bfloat16, device=dev)
    parts_lse = torch.empty(world, rows, dtype=torch.float32, device=dev)
    dist.all_gather_into_tensor(parts_out, out.view(rows, D_C))
    dist.all_gather_into_tensor(parts_lse, lse.view(rows))
    merged = torch.empty(rows, D_C, dtype=torch.bfloat16, device=dev)
    merged_lse = torch.empty(rows, dtype=torch.float32, device=dev)
    mlakit.merge(parts_out, parts_lse, merged, merged_lse)

    if rank == 0:  # against the unsharded decode of the same problem
        whole = torch.empty_like(out)
        whole_lse = torch.empty_like(lse)
        mlakit.decode(q, cache.to(dev), table.to(dev), seq_lens, whole, whole_lse, softmax_scale=TAU, causal=True)
        err = (merged.float() - whole.view(rows, D_C).float()).abs().max().item()
        ref_lse = whole_lse.view(rows)
        finite = torch.isfinite(ref_lse)
        lse_err = (merged_lse[finite] - ref_lse[finite]).abs()
        lse_ok = bool((lse_err <= 1e-4 + 1e-4 * ref_lse[finite].abs()).all())  # docs/spec.md section 10
        same_empty = bool(torch.equal(torch.isneginf(merged_lse), torch.isneginf(ref_lse)))
        ok = err <= 2.0**-8 + 2.0**-6 and lse_ok and same_empty  # section 10's bf16 bound with vmax, |ref| <= 1
        lse_err = lse_err.max().item()
        print(f"context-parallel decode over {world} GPU(s): max |out - unsharded| = {err:.2e}, "
              f"max |lse - unsharded| = {lse_err:.2e}, empty rows agree: {same_empty} -> {'ok' if ok else 'FAILED'}")
        if not ok:
            raise SystemExit(1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
