"""MLAKit operations as ``torch.library`` custom ops (namespace ``mlakit``), with fake (meta)
implementations so that they trace under ``torch.compile`` and run inside ``torch.cuda.graph`` capture.

Import this module to register the ops; call them as ``mlakit.torch.decode(...)`` or
``torch.ops.mlakit.decode(...)``. Each runs on the current torch stream of its tensors' device and
allocates its outputs (and any workspace) with torch, so graph capture pools them.

The cache is a plain tensor plus ``kv_format`` ('' infers bf16/fp16/fp8_e4m3 from its dtype; uint8
caches name it, e.g. 'fp8_ds_mla') and ``d_c`` (its ``d_r`` is ``q.shape[-1] - d_c``). Shapes and
conventions are MLAKit's native ones (lse ``[b, s_q, h_q]``, ``-inf`` for empty rows).

For CUDA graphs, split decode into :func:`decode_plan` (once per step, writes the schedule into a
workspace tensor sized by :func:`decode_workspace_bytes`) and :func:`decode_run` (once per layer):
replaying the graph after updating ``seq_lens`` / ``block_table`` in place re-plans on the device.
"""


from typing import Optional

import torch
from torch import Tensor

import mlakit

__all__ = [
    "append_kv",
    "decode",
    "decode_plan",
    "decode_run",
    "decode_workspace_bytes",
    "gather_kv",
    "merge_pair",
    "prefill",
    "rope",
    "sparse_decode",
]


def _stream(t: Tensor):
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else None


def _cache(kv_cache: Tensor, kv_format: str, d_c: int, d_qk: int, kv_scale: Optional[Tensor] = None,
           v_whole_row: bool = False):
    return mlakit.KvCache(kv_cache, kv_format or None, d_c=d_c, d_r=d_qk - d_c, kv_scale=kv_scale,
                          v_whole_row=v_whole_row)


def _decode_outputs(q: Tensor, d_c: int):
    b, s_q, h_q, _ = q.shape
    return q.new_empty((b, s_q, h_q, d_c)), q.new_empty((b, s_q, h_q), dtype=torch.float32)


def decode_workspace_bytes(q, kv_cache, block_table, seq_lens, softmax_scale, causal=False, kv_format="", d_c=512):
    """Bytes of the uint8 workspace tensor that :func:`decode_plan` / :func:`decode_run` need (0 on CPU)."""
    out, lse = _decode_outputs(q, d_c)
    return mlakit.decode_workspace_bytes(q, _cache(kv_cache, kv_format, d_c, q.shape[-1]), block_table, seq_lens,
                                         out, lse, softmax_scale=softmax_scale, causal=causal)


# ---- dense decode -------------------------------------------------------------------------------


@torch.library.custom_op("mlakit::decode", mutates_args=())
def decode(q: Tensor, kv_cache: Tensor, block_table: Tensor, seq_lens: Tensor, softmax_scale: float,
           causal: bool = False, kv_format: str = "", d_c: int = 512,
           kv_scale: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Dense decode (plan + run in one call). Returns (out [b, s_q, h_q, d_c], lse [b, s_q, h_q])."""
    out, lse = _decode_outputs(q, d_c)
    cache = _cache(kv_cache, kv_format, d_c, q.shape[-1], kv_scale)
    kw = dict(softmax_scale=softmax_scale, causal=causal)
    nbytes = mlakit.decode_workspace_bytes(q, cache, block_table, seq_lens, out, lse, **kw)
    workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=q.device)
    mlakit.decode(q, cache, block_table, seq_lens, out, lse, workspace=workspace, stream=_stream(q), **kw)
    return out, lse


@decode.register_fake
def _(q, kv_cache, block_table, seq_lens, softmax_scale, causal=False, kv_format="", d_c=512, kv_scale=None):
    return _decode_outputs(q, d_c)


@torch.library.custom_op("mlakit::decode_plan", mutates_args=("workspace",))
def decode_plan(workspace: Tensor, q: Tensor, kv_cache: Tensor, block_table: Tensor, seq_lens: Tensor,
                softmax_scale: float, causal: bool = False, kv_format: str = "", d_c: int = 512) -> None:
    """Writes this step's split-KV schedule into `workspace` (device-side, from seq_lens)."""
    out, lse = _decode_outputs(q, d_c)
    mlakit.decode_plan_step(q, _cache(kv_cache, kv_format, d_c, q.shape[-1]), block_table, seq_lens, out, lse,
                            softmax_scale=softmax_scale, causal=causal, workspace=workspace, stream=_stream(q))


@decode_plan.register_fake
def _(workspace, q, kv_cache, block_table, seq_lens, softmax_scale, causal=False, kv_format="", d_c=512):
    return None


@torch.library.custom_op("mlakit::decode_run", mutates_args=())
def decode_run(workspace: Tensor, q: Tensor, kv_cache: Tensor, block_table: Tensor, seq_lens: Tensor,
               softmax_scale: float, causal: bool = False, kv_format: str = "", d_c: int = 512,
               kv_scale: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Decode for one layer with the schedule :func:`decode_plan` left in `workspace`."""
    out, lse = _decode_outputs(q, d_c)
    mlakit.decode_run_step(q, _cache(kv_cache, kv_format, d_c, q.shape[-1], kv_scale), block_table, seq_lens, out,
                           lse, softmax_scale=softmax_scale, causal=causal, workspace=workspace, stream=_stream(q))
    return out, lse


@decode_run.register_fake
def _(workspace, q, kv_cache, block_table, seq_lens, softmax_scale, causal=False, kv_format="", d_c=512,
      kv_scale=None):
    return _decode_outputs(q, d_c)


# ---- sparse decode, prefill, merge ------------------------------------------------------------------


@torch.library.custom_op("mlakit::sparse_decode", mutates_args=())
def sparse_decode(q: Tensor, kv_cache: Tensor, indices: Tensor, softmax_scale: float, kv_format: str = "",
                  d_c: int = 512, topk_length: Optional[Tensor] = None, attn_sink: Optional[Tensor] = None,
                  v_whole_row: bool = False, extra_kv_cache: Optional[Tensor] = None,
                  extra_indices: Optional[Tensor] = None,
                  extra_topk_length: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Sparse top-k decode over global row ids. Returns (out, lse) in MLAKit's layout.

    DeepSeek V4: ``d_c=448, v_whole_row=True`` (out has all 512 columns), ``kv_format='fp8_ds_v4'`` for its paged
    cache, and the extra cache ``extra_kv_cache`` (same format, its own page size) with ``extra_indices``
    ``[b, s_q, extra_topk]`` and optional ``extra_topk_length`` ``[b]``: one softmax over both id sets.
    """
    out, lse = _decode_outputs(q, q.shape[-1] if v_whole_row else d_c)
    cache = _cache(kv_cache, kv_format, d_c, q.shape[-1], v_whole_row=v_whole_row)
    kw = dict(softmax_scale=softmax_scale, topk_length=topk_length, attn_sink=attn_sink)
    if extra_kv_cache is not None or extra_indices is not None:
        if extra_kv_cache is None or extra_indices is None:
            raise ValueError("extra_kv_cache and extra_indices: the extra cache needs both")
        kw.update(extra_kv_cache=_cache(extra_kv_cache, kv_format, d_c, q.shape[-1], v_whole_row=v_whole_row),
                  extra_indices=extra_indices, extra_topk_length=extra_topk_length)
    nbytes = mlakit.sparse_decode_workspace_bytes(q, cache, indices, out, lse, **kw)
    workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=q.device)
    mlakit.sparse_decode(q, cache, indices, out, lse, workspace=workspace, stream=_stream(q), **kw)
    return out, lse


@sparse_decode.register_fake
def _(q, kv_cache, indices, softmax_scale, kv_format="", d_c=512, topk_length=None, attn_sink=None,
      v_whole_row=False, extra_kv_cache=None, extra_indices=None, extra_topk_length=None):
    return _decode_outputs(q, q.shape[-1] if v_whole_row else d_c)


@torch.library.custom_op("mlakit::prefill", mutates_args=())
def prefill(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, softmax_scale: float,
            causal: bool = False) -> tuple[Tensor, Tensor]:
    """Ragged MHA prefill. Returns (out [T_q, h_q, d_vh], lse [T_q, h_q])."""
    out = q.new_empty((q.shape[0], q.shape[1], v.shape[2]))
    lse = q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)
    mlakit.prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, softmax_scale=softmax_scale, causal=causal,
                   stream=_stream(q))
    return out, lse


@prefill.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal=False):
    return q.new_empty((q.shape[0], q.shape[1], v.shape[2])), q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)


@torch.library.custom_op("mlakit::merge_pair", mutates_args=())
def merge_pair(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Merges two partial attention states. Returns (out, lse)."""
    out, lse = torch.empty_like(out_a), torch.empty_like(lse_a)
    mlakit.merge_pair(out_a, lse_a, out_b, lse_b, out, lse, stream=_stream(out_a))
    return out, lse


@merge_pair.register_fake
def _(out_a, lse_a, out_b, lse_b):
    return torch.empty_like(out_a), torch.empty_like(lse_a)


# ---- cache writes and RoPE (in place) -------------------------------------------------------------


def _append(kv_c, k_pe, slot_mapping, kv_cache, kv_format, positions, cos_sin, rope_style, q, kv_scale) -> None:
    cache = mlakit.KvCache(kv_cache, kv_format or None, d_c=kv_c.shape[-1], d_r=k_pe.shape[-1], kv_scale=kv_scale)
    mlakit.append_kv(kv_c, k_pe, slot_mapping, cache, positions=positions, cos_sin=cos_sin, rope_style=rope_style,
                     q=q, stream=_stream(kv_c))


# Two ops rather than one with an optional mutated `q`: torch's in-place bookkeeping indexes mutated
# arguments by position and failed (IndexError) when the optional `q` was left at its default.
@torch.library.custom_op("mlakit::append_kv", mutates_args=("kv_cache",))
def _append_kv(kv_c: Tensor, k_pe: Tensor, slot_mapping: Tensor, kv_cache: Tensor, kv_format: str = "",
               positions: Optional[Tensor] = None, cos_sin: Optional[Tensor] = None,
               rope_style: str = "interleaved", kv_scale: Optional[Tensor] = None) -> None:
    _append(kv_c, k_pe, slot_mapping, kv_cache, kv_format, positions, cos_sin, rope_style, None, kv_scale)


@_append_kv.register_fake
def _(kv_c, k_pe, slot_mapping, kv_cache, kv_format="", positions=None, cos_sin=None, rope_style="interleaved",
      kv_scale=None):
    return None


@torch.library.custom_op("mlakit::append_kv_rope_q", mutates_args=("kv_cache", "q"))
def _append_kv_rope_q(kv_c: Tensor, k_pe: Tensor, slot_mapping: Tensor, kv_cache: Tensor, q: Tensor,
                      positions: Tensor, cos_sin: Tensor, kv_format: str = "", rope_style: str = "interleaved",
                      kv_scale: Optional[Tensor] = None) -> None:
    _append(kv_c, k_pe, slot_mapping, kv_cache, kv_format, positions, cos_sin, rope_style, q, kv_scale)


@_append_kv_rope_q.register_fake
def _(kv_c, k_pe, slot_mapping, kv_cache, q, positions, cos_sin, kv_format="", rope_style="interleaved",
      kv_scale=None):
    return None


def append_kv(kv_c: Tensor, k_pe: Tensor, slot_mapping: Tensor, kv_cache: Tensor, kv_format: str = "",
              positions: Optional[Tensor] = None, cos_sin: Optional[Tensor] = None,
              rope_style: str = "interleaved", q: Optional[Tensor] = None,
              kv_scale: Optional[Tensor] = None) -> None:
    """Writes new tokens into the cache; with positions/cos_sin, RoPE on k_pe (and q's last d_r columns in
    place when q is given: op ``mlakit::append_kv_rope_q``, else ``mlakit::append_kv``)."""
    if q is None:
        _append_kv(kv_c, k_pe, slot_mapping, kv_cache, kv_format, positions, cos_sin, rope_style, kv_scale)
    else:
        _append_kv_rope_q(kv_c, k_pe, slot_mapping, kv_cache, q, positions, cos_sin, kv_format, rope_style, kv_scale)


@torch.library.custom_op("mlakit::rope", mutates_args=("x",))
def rope(x: Tensor, positions: Tensor, cos_sin: Tensor, style: str = "interleaved") -> None:
    """RoPE on x [T, H, d_r] in place."""
    mlakit.rope(x, positions, cos_sin, style=style, stream=_stream(x))


@rope.register_fake
def _(x, positions, cos_sin, style="interleaved"):
    return None


@torch.library.custom_op("mlakit::gather_kv", mutates_args=())
def gather_kv(kv_cache: Tensor, block_table: Tensor, seq_lens: Tensor, cu_out: Tensor, total_rows: int,
              kv_format: str = "", d_c: int = 512, d_r: int = 64) -> Tensor:
    """Dequantised rows of every request as bf16 [total_rows, d_c + d_r]."""
    out = torch.empty((total_rows, d_c + d_r), dtype=torch.bfloat16, device=kv_cache.device)
    cache = mlakit.KvCache(kv_cache, kv_format or None, d_c=d_c, d_r=d_r)
    mlakit.gather_kv(cache, block_table, seq_lens, cu_out, out, stream=_stream(kv_cache))
    return out


@gather_kv.register_fake
def _(kv_cache, block_table, seq_lens, cu_out, total_rows, kv_format="", d_c=512, d_r=64):
    return torch.empty((total_rows, d_c + d_r), dtype=torch.bfloat16, device=kv_cache.device)
