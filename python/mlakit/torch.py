"""MLAKit operations as torch operators (namespace ``mlakit``), with fake (meta) implementations so that they
trace under ``torch.compile`` and run inside ``torch.cuda.graph`` capture.

Import this module to register the ops; call them as ``mlakit.torch.decode(...)`` or
``torch.ops.mlakit.decode(...)``. Each runs on the current torch stream of its tensors' device and
allocates its outputs (and any workspace) with torch, so graph capture pools them.

The cache is a plain tensor plus ``kv_format`` ('' infers bf16/fp16/fp8_e4m3 from its dtype; uint8
caches name it, e.g. 'fp8_ds_mla') and ``d_c`` (its ``d_r`` is ``q.shape[-1] - d_c``). Shapes and
conventions are MLAKit's native ones (lse ``[b, s_q, h_q]``, ``-inf`` for empty rows).

The operators are defined with ``torch.library.Library`` (schema, CPU and CUDA kernels, fake kernel) rather than
``torch.library.custom_op``: the same dispatcher entry at a third of the host time per call (custom_op adds
Python-level autograd and bookkeeping layers; measured in docs/performance.md). Each kernel makes one call into
the native module, which takes torch's current stream and allocates the workspace through torch itself. Where the
package was built with torch present, the per-layer operators (decode, sparse_decode, append_kv, append_kv_rope_q)
come from C++ instead (``mlakit/_torch_ops.so``, same schemas; :data:`CPP_OPS` says which serve), with no Python
frame in an eager call; ``MLAKIT_TORCH_OPS=python`` keeps the Python ones.

For CUDA graphs, split decode into :func:`decode_plan` (once per step, writes the schedule into a
workspace tensor sized by :func:`decode_workspace_bytes`) and :func:`decode_run` (once per layer):
replaying the graph after updating ``seq_lens`` / ``block_table`` in place re-plans on the device.
"""


import os
import warnings
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


def _load_cpp_ops() -> bool:
    """Loads mlakit/_torch_ops.so, the per-layer operators registered from C++ (python/torch_ops/), when the package
    has it (built where torch was present) and MLAKIT_TORCH_OPS is not 'python'."""
    path = os.path.join(os.path.dirname(mlakit.__file__), "_torch_ops.so")
    if os.environ.get("MLAKIT_TORCH_OPS", "") == "python" or not os.path.exists(path):
        return False
    try:
        torch.ops.load_library(path)
    except OSError as e:  # built against another torch
        warnings.warn(f"mlakit: {path} does not load with torch {torch.__version__} ({e}); its operators run in Python")
        return False
    return True


CPP_OPS = _load_cpp_ops()  # whether decode, sparse_decode, append_kv and append_kv_rope_q are the C++ ones
_lib = torch.library.Library("mlakit", "FRAGMENT")  # the registrations live as long as this object
_SCHEMAS: dict[str, str] = {}  # name -> schema, as defined here (the C++ operators must match: a test checks)
_KERNELS: dict[str, object] = {}  # name -> Python kernel (the fallback where the C++ operator is absent)


def _op(schema: str, fake):
    """Defines ``mlakit::<name>`` from `schema` with the decorated function as its CPU and CUDA kernel and `fake` as
    its fake (meta) kernel; returns ``torch.ops.mlakit.<name>``. An operator _torch_ops.so already defined keeps its
    C++ kernels and gets only the fake one."""

    def register(kernel):
        name = schema.split("(", 1)[0]
        _SCHEMAS[name] = schema
        _KERNELS[name] = kernel
        if not hasattr(torch.ops.mlakit, name):
            _lib.define(schema)
            _lib.impl(name, kernel, "CPU")
            _lib.impl(name, kernel, "CUDA")
        torch.library.register_fake(f"mlakit::{name}", fake, lib=_lib)
        op = getattr(torch.ops.mlakit, name)
        op.__doc__ = kernel.__doc__
        return op

    return register


def _workspace(device):
    """A workspace allocator for the native call: it asks for the bytes the chosen backend needs, once it has
    validated the call and chosen the backend, and torch allocates them (so graph capture pools them)."""
    return lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device=device)


def _cache(kv_cache: Tensor, kv_format: str, d_c: int, d_qk: int, kv_scale: Optional[Tensor] = None,
           v_whole_row: bool = False):
    if not kv_format and d_c == 512 and d_qk == 576 and kv_scale is None and not v_whole_row:
        return kv_cache  # the native call wraps a plain tensor with exactly these defaults, without a KvCache object
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

_DECODE_ARGS = ("Tensor q, Tensor kv_cache, Tensor block_table, Tensor seq_lens, float softmax_scale, "
                "bool causal=False, str kv_format='', int d_c=512")


def _decode_fake(q, kv_cache, block_table, seq_lens, softmax_scale, causal=False, kv_format="", d_c=512,
                 kv_scale=None):
    return _decode_outputs(q, d_c)


@_op(f"decode({_DECODE_ARGS}, Tensor? kv_scale=None) -> (Tensor, Tensor)", _decode_fake)
def decode(q, kv_cache, block_table, seq_lens, softmax_scale, causal=False, kv_format="", d_c=512, kv_scale=None):
    """Dense decode (plan + run in one call). Returns (out [b, s_q, h_q, d_c], lse [b, s_q, h_q])."""
    out, lse = _decode_outputs(q, d_c)
    mlakit.decode(q, _cache(kv_cache, kv_format, d_c, q.shape[-1], kv_scale), block_table, seq_lens, out, lse,
                  softmax_scale=softmax_scale, causal=causal, workspace=_workspace(q.device))
    return out, lse


@_op(f"decode_plan(Tensor(a!) workspace, {_DECODE_ARGS}) -> ()",
     lambda workspace, q, kv_cache, block_table, seq_lens, softmax_scale, causal=False, kv_format="", d_c=512: None)
def decode_plan(workspace, q, kv_cache, block_table, seq_lens, softmax_scale, causal=False, kv_format="", d_c=512):
    """Writes this step's split-KV schedule into `workspace` (device-side, from seq_lens)."""
    out, lse = _decode_outputs(q, d_c)
    mlakit.decode_plan_step(q, _cache(kv_cache, kv_format, d_c, q.shape[-1]), block_table, seq_lens, out, lse,
                            softmax_scale=softmax_scale, causal=causal, workspace=workspace)


@_op(f"decode_run(Tensor(a!) workspace, {_DECODE_ARGS}, Tensor? kv_scale=None) -> (Tensor, Tensor)",
     lambda workspace, *args, **kwargs: _decode_fake(*args, **kwargs))
def decode_run(workspace, q, kv_cache, block_table, seq_lens, softmax_scale, causal=False, kv_format="", d_c=512,
               kv_scale=None):
    """Decode for one layer with the schedule :func:`decode_plan` left in `workspace`, which it also writes (the
    split rows' partial results, and the schedule itself where the decode CTAs plan their own partitions): so the
    schema marks it mutated, and torch.compile keeps the calls sharing a workspace in order."""
    out, lse = _decode_outputs(q, d_c)
    mlakit.decode_run_step(q, _cache(kv_cache, kv_format, d_c, q.shape[-1], kv_scale), block_table, seq_lens, out,
                           lse, softmax_scale=softmax_scale, causal=causal, workspace=workspace)
    return out, lse


# ---- sparse decode, prefill, merge ------------------------------------------------------------------


def _sparse_fake(q, kv_cache, indices, softmax_scale, kv_format="", d_c=512, topk_length=None, attn_sink=None,
                 v_whole_row=False, extra_kv_cache=None, extra_indices=None, extra_topk_length=None):
    return _decode_outputs(q, q.shape[-1] if v_whole_row else d_c)


@_op("sparse_decode(Tensor q, Tensor kv_cache, Tensor indices, float softmax_scale, str kv_format='', int d_c=512, "
     "Tensor? topk_length=None, Tensor? attn_sink=None, bool v_whole_row=False, Tensor? extra_kv_cache=None, "
     "Tensor? extra_indices=None, Tensor? extra_topk_length=None) -> (Tensor, Tensor)", _sparse_fake)
def sparse_decode(q, kv_cache, indices, softmax_scale, kv_format="", d_c=512, topk_length=None, attn_sink=None,
                  v_whole_row=False, extra_kv_cache=None, extra_indices=None, extra_topk_length=None):
    """Sparse top-k decode over global row ids. Returns (out, lse) in MLAKit's layout.

    DeepSeek V4: ``d_c=448, v_whole_row=True`` (out has all 512 columns), ``kv_format='fp8_ds_v4'`` for its paged
    cache, and the extra cache ``extra_kv_cache`` (same format, its own page size) with ``extra_indices``
    ``[b, s_q, extra_topk]`` and optional ``extra_topk_length`` ``[b]``: one softmax over both id sets.
    """
    out, lse = _decode_outputs(q, q.shape[-1] if v_whole_row else d_c)
    cache = _cache(kv_cache, kv_format, d_c, q.shape[-1], v_whole_row=v_whole_row)
    # extra_topk_length goes through even without an extra cache, so that validation refuses it by name.
    kw = dict(softmax_scale=softmax_scale, topk_length=topk_length, attn_sink=attn_sink,
              extra_topk_length=extra_topk_length)
    if extra_kv_cache is not None or extra_indices is not None:
        if extra_kv_cache is None or extra_indices is None:
            raise ValueError("extra_kv_cache and extra_indices: the extra cache needs both")
        kw.update(extra_kv_cache=_cache(extra_kv_cache, kv_format, d_c, q.shape[-1], v_whole_row=v_whole_row),
                  extra_indices=extra_indices)
    mlakit.sparse_decode(q, cache, indices, out, lse, workspace=_workspace(q.device), **kw)
    return out, lse


def _prefill_outputs(q, v):
    return q.new_empty((q.shape[0], q.shape[1], v.shape[2])), q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)


@_op("prefill(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, float softmax_scale, "
     "bool causal=False) -> (Tensor, Tensor)",
     lambda q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal=False: _prefill_outputs(q, v))
def prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal=False):
    """Ragged MHA prefill. Returns (out [T_q, h_q, d_vh], lse [T_q, h_q])."""
    out, lse = _prefill_outputs(q, v)
    mlakit.prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, softmax_scale=softmax_scale, causal=causal)
    return out, lse


@_op("merge_pair(Tensor out_a, Tensor lse_a, Tensor out_b, Tensor lse_b) -> (Tensor, Tensor)",
     lambda out_a, lse_a, out_b, lse_b: (torch.empty_like(out_a), torch.empty_like(lse_a)))
def merge_pair(out_a, lse_a, out_b, lse_b):
    """Merges two partial attention states. Returns (out, lse)."""
    out, lse = torch.empty_like(out_a), torch.empty_like(lse_a)
    mlakit.merge_pair(out_a, lse_a, out_b, lse_b, out, lse)
    return out, lse


# ---- cache writes and RoPE (in place) -------------------------------------------------------------


def _append(kv_c, k_pe, slot_mapping, kv_cache, kv_format, positions, cos_sin, rope_style, q, kv_scale) -> None:
    cache = mlakit.KvCache(kv_cache, kv_format or None, d_c=kv_c.shape[-1], d_r=k_pe.shape[-1], kv_scale=kv_scale)
    mlakit.append_kv(kv_c, k_pe, slot_mapping, cache, positions=positions, cos_sin=cos_sin, rope_style=rope_style,
                     q=q)


def _no_output(*args, **kwargs):
    return None


# Two ops rather than one with an optional mutated `q`: torch's in-place bookkeeping indexes mutated
# arguments by position and failed (IndexError) when the optional `q` was left at its default.
@_op("append_kv(Tensor kv_c, Tensor k_pe, Tensor slot_mapping, Tensor(a!) kv_cache, str kv_format='', "
     "Tensor? positions=None, Tensor? cos_sin=None, str rope_style='interleaved', Tensor? kv_scale=None) -> ()",
     _no_output)
def _append_kv(kv_c, k_pe, slot_mapping, kv_cache, kv_format="", positions=None, cos_sin=None,
               rope_style="interleaved", kv_scale=None):
    _append(kv_c, k_pe, slot_mapping, kv_cache, kv_format, positions, cos_sin, rope_style, None, kv_scale)


@_op("append_kv_rope_q(Tensor kv_c, Tensor k_pe, Tensor slot_mapping, Tensor(a!) kv_cache, Tensor(b!) q, "
     "Tensor positions, Tensor cos_sin, str kv_format='', str rope_style='interleaved', Tensor? kv_scale=None) -> ()",
     _no_output)
def _append_kv_rope_q(kv_c, k_pe, slot_mapping, kv_cache, q, positions, cos_sin, kv_format="",
                      rope_style="interleaved", kv_scale=None):
    _append(kv_c, k_pe, slot_mapping, kv_cache, kv_format, positions, cos_sin, rope_style, q, kv_scale)


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


@_op("rope(Tensor(a!) x, Tensor positions, Tensor cos_sin, str style='interleaved') -> ()", _no_output)
def rope(x, positions, cos_sin, style="interleaved"):
    """RoPE on x [T, H, d_r] in place."""
    mlakit.rope(x, positions, cos_sin, style=style)


def _gather_out(kv_cache, total_rows, d_c, d_r):
    return torch.empty((total_rows, d_c + d_r), dtype=torch.bfloat16, device=kv_cache.device)


@_op("gather_kv(Tensor kv_cache, Tensor block_table, Tensor seq_lens, Tensor cu_out, int total_rows, "
     "str kv_format='', int d_c=512, int d_r=64) -> Tensor",
     lambda kv_cache, block_table, seq_lens, cu_out, total_rows, kv_format="", d_c=512, d_r=64:
     _gather_out(kv_cache, total_rows, d_c, d_r))
def gather_kv(kv_cache, block_table, seq_lens, cu_out, total_rows, kv_format="", d_c=512, d_r=64):
    """Dequantised rows of every request as bf16 [total_rows, d_c + d_r]."""
    out = _gather_out(kv_cache, total_rows, d_c, d_r)
    mlakit.gather_kv(mlakit.KvCache(kv_cache, kv_format or None, d_c=d_c, d_r=d_r), block_table, seq_lens, cu_out,
                     out)
    return out
