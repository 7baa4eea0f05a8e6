"""Drop-in replacement for FlashInfer's MLA decode wrapper (``flashinfer.mla``): change one import.

    # from flashinfer.mla import BatchMLAPagedAttentionWrapper
    from mlakit.compat.flashinfer import BatchMLAPagedAttentionWrapper

    wrapper = BatchMLAPagedAttentionWrapper(workspace_buffer)
    wrapper.plan(qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, 512, 64, page_size,
                 causal, sm_scale, torch.bfloat16, torch.bfloat16)      # once per step
    out = wrapper.run(q_nope, q_pe, ckv_cache, kpe_cache)               # once per layer

Shapes and conventions are FlashInfer's; every conversion to MLAKit's native ones happens here, at the boundary:

* ``ckv_cache [num_pages, page_size, head_dim_ckv]`` and ``kpe_cache [num_pages, page_size, head_dim_kpe]`` are
  read in place as one split cache (``mlakit.KvCache(ckv, k_pe=kpe)``, docs/spec.md section 4): no copy. When they
  are two column slices of one ``[..., head_dim_ckv + head_dim_kpe]`` array (the layout vLLM and SGLang allocate),
  that array is used as one joined cache, which every CUDA path reads (the Hopper one included); two separate
  arrays run on the portable CUDA path, which reads split caches.
* ``kv_indptr`` / ``kv_indices`` are MLAKit's flat block table (``block_table_indptr`` / ``block_table``); the
  request lengths are ``kv_len_arr``. Token ``t`` of request ``i`` is row ``t % page_size`` of page
  ``kv_indices[kv_indptr[i] + t // page_size]``.
* ``qo_indptr`` must give every request the same number of query tokens, 1..8 (``s_q``: decode, or speculative
  decoding with ``causal=True``, bottom-right aligned as in FlashInfer); ragged query lengths raise ``ValueError``.
* ``q_nope [b * s_q, num_heads, head_dim_ckv]`` and ``q_pe [b * s_q, num_heads, head_dim_kpe]`` are joined into
  MLAKit's absorbed query (one copy of q per call: q is small beside the cache).
* ``sm_scale`` is MLAKit's ``softmax_scale`` (no default, as in FlashInfer).
* ``lse [b * s_q, num_heads]`` float32 is returned (and a given ``lse`` written) as FlashInfer defines it: base 2 (``log2`` of the sum of
  ``2^(s * log2(e))``, i.e. MLAKit's natural-log LSE times ``log2(e)``), or natural log with
  ``return_lse_base_on_e=True``. A row with no key (``kv_len = 0``) gets ``lse = -inf`` and ``out = 0``.
* The split-KV schedule: ``plan`` keeps the arrays (copying them into the constructor's buffers when the wrapper
  was made for CUDA graphs, as FlashInfer does) and the next ``run`` plans on the device from ``kv_len_arr``; the
  following runs (one per layer) reuse that plan. A wrapper made with ``use_cuda_graph=True`` plans inside every
  ``run`` instead (one small kernel per layer), so that a captured graph re-plans from the buffers' contents each
  time it replays.
* ``float_workspace_buffer`` holds MLAKit's workspace (any dtype; its bytes are used). Too small a buffer raises
  ``ValueError`` with the bytes needed. Unlike FlashInfer's, it also holds the step's schedule from the first
  ``run`` after ``plan`` to the last: do not share it with another wrapper that writes it in between (FlashInfer
  keeps its plan elsewhere, so engines share this buffer), unless ``use_cuda_graph=True`` (planned in every ``run``).
  ``kv_indptr``, ``kv_indices`` and ``kv_len_arr``, when already int32 on the workspace's device (not copied), are
  read by that first ``run``, not at ``plan``.
* ``backend``: ``"auto"``, ``"fa2"`` and ``"fa3"`` name FlashInfer's kernels; MLAKit picks its own backend (the
  one chosen is :attr:`BatchMLAPagedAttentionWrapper.mlakit_backend`). ``"cutlass"`` has another ``run``
  contract and is refused.

Arrays may be torch tensors (CPU or CUDA), cupy arrays or numpy arrays (CPU; ``ml_dtypes.bfloat16`` for bf16).
Not served (raise with the reason): ragged ``qo_indptr``, ``use_profiler`` / ``profiler_buffer``, and the cutlass
backend's ``kv_len`` / ``page_table`` arguments.
"""

from __future__ import annotations

import math

import mlakit

from .. import _arrays

__all__ = ["BatchMLAPagedAttentionWrapper"]

_LOG2E = 1.0 / math.log(2.0)
_FLASHINFER_KERNELS = ("auto", "fa2", "fa3")


class BatchMLAPagedAttentionWrapper:
    """FlashInfer's ``BatchMLAPagedAttentionWrapper`` on MLAKit's decode (see the module docstring)."""

    def __init__(
        self,
        float_workspace_buffer,
        use_cuda_graph: bool = False,
        qo_indptr=None,
        kv_indptr=None,
        kv_indices=None,
        kv_len_arr=None,
        backend: str = "auto",
    ) -> None:
        if backend not in _FLASHINFER_KERNELS:
            raise ValueError(
                f"backend={backend!r}: MLAKit serves FlashInfer's plan/run contract ({', '.join(_FLASHINFER_KERNELS)}); "
                "the cutlass backend's run(kv_len=, page_table=) is not served"
            )
        self._workspace = _arrays.as_bytes(float_workspace_buffer)
        self._use_cuda_graph = bool(use_cuda_graph)
        buffers = {"qo_indptr": qo_indptr, "kv_indptr": kv_indptr, "kv_indices": kv_indices, "kv_len_arr": kv_len_arr}
        if self._use_cuda_graph:
            missing = [name for name, buf in buffers.items() if buf is None]
            if missing:
                raise ValueError(f"use_cuda_graph=True needs the {', '.join(missing)} buffer(s): the graph reads them")
        self._buffers = buffers
        self._step = None  # what plan() fixed: arrays, shapes, scalars
        self._decode_plan = None
        self._plan_key = None
        self._stale = True

    @property
    def mlakit_backend(self):
        """The MLAKit backend the current plan runs on (None before the first run)."""
        return None if self._decode_plan is None else self._decode_plan.backend

    def plan(
        self,
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_len_arr,
        num_heads: int,
        head_dim_ckv: int,
        head_dim_kpe: int,
        page_size: int,
        causal: bool,
        sm_scale: float,
        q_data_type,
        kv_data_type,
        use_profiler: bool = False,
    ) -> None:
        """FlashInfer's ``plan``: fixes the step's page lists, lengths and shapes (reads ``qo_indptr`` on the host)."""
        if use_profiler:
            raise ValueError("use_profiler=True: FlashInfer's intra-kernel profiler is not served")
        qo = _arrays.to_host_ints(qo_indptr)
        batch = int(qo.shape[0]) - 1
        if batch < 1:
            raise ValueError(f"qo_indptr: {qo.shape[0]} entries, needs batch + 1 >= 2")
        lengths = qo[1:] - qo[:-1]
        s_q = int(lengths[0])
        if qo[0] != 0 or not (lengths == s_q).all() or not 1 <= s_q <= 8:
            raise ValueError(
                f"qo_indptr={qo.tolist()[:9]}{'...' if qo.shape[0] > 9 else ''}: MLAKit decode takes the same number "
                "of query tokens (1..8) for every request, starting at 0; ragged query lengths are not served"
            )
        for name, x, n in (("kv_indptr", kv_indptr, batch + 1), ("kv_len_arr", kv_len_arr, batch)):
            if int(x.shape[0]) != n:
                raise ValueError(f"{name}: {x.shape[0]} entries, qo_indptr gives {n}")
        arrays = {"kv_indptr": kv_indptr, "kv_indices": kv_indices, "kv_len_arr": kv_len_arr}
        if self._use_cuda_graph:
            # Every capacity first: a refused plan() leaves the captured buffers as the last good plan() left them.
            for name, src in (("qo_indptr", qo_indptr), *arrays.items()):
                buf = self._buffers[name]
                if int(src.shape[0]) > int(buf.shape[0]):
                    raise ValueError(f"{name}: {src.shape[0]} entries, the CUDA-graph buffer holds {buf.shape[0]}")
            # MLAKit reads qo_indptr on the host only; refilled as FlashInfer does. A captured graph reads the others:
            # refilled in place.
            for name, src in (("qo_indptr", qo_indptr), *arrays.items()):
                buf = self._buffers[name]
                _arrays.copy_into(buf, _arrays.int32_like(src, buf))
            # Views from each buffer's start (the addresses a graph captured); kv_indices whole, its capacity.
            arrays = {
                "kv_indptr": self._buffers["kv_indptr"][: batch + 1],
                "kv_indices": self._buffers["kv_indices"],
                "kv_len_arr": self._buffers["kv_len_arr"][:batch],
            }
        else:
            arrays = {name: _arrays.int32_like(src, self._workspace) for name, src in arrays.items()}
        self._step = {
            "batch": batch,
            "s_q": s_q,
            "num_heads": int(num_heads),
            "d_c": int(head_dim_ckv),
            "d_r": int(head_dim_kpe),
            "page_size": int(page_size),
            "causal": bool(causal),
            "sm_scale": float(sm_scale),
            "q_dtype": q_data_type,
            "kv_dtype": kv_data_type,
            **arrays,
        }
        self._stale = True

    def run(
        self,
        q_nope,
        q_pe,
        ckv_cache,
        kpe_cache,
        out=None,
        lse=None,
        return_lse: bool = False,
        profiler_buffer=None,
        kv_len=None,
        page_table=None,
        return_lse_base_on_e: bool = False,
    ):
        """FlashInfer's ``run``: returns ``out [b * s_q, num_heads, head_dim_ckv]`` (q's dtype), and with
        ``return_lse`` also ``lse [b * s_q, num_heads]`` float32 (base 2 unless ``return_lse_base_on_e``)."""
        step = self._step
        if step is None:
            raise ValueError("run() before plan(): call plan() once per step")
        if profiler_buffer is not None or kv_len is not None or page_table is not None:
            raise ValueError("profiler_buffer / kv_len / page_table: the profiler and the cutlass backend are not served")
        b, s_q, h, d_c, d_r = step["batch"], step["s_q"], step["num_heads"], step["d_c"], step["d_r"]
        rows = b * s_q
        for name, x, width in (("q_nope", q_nope, d_c), ("q_pe", q_pe, d_r)):
            if tuple(int(s) for s in x.shape) != (rows, h, width):
                raise ValueError(f"{name}: shape {tuple(x.shape)}, plan() gives ({rows}, {h}, {width})")
        _check_dtype("q_nope", q_nope, step["q_dtype"])
        if q_pe.dtype != q_nope.dtype or kpe_cache.dtype != ckv_cache.dtype:
            raise ValueError(f"q_pe / kpe_cache: dtypes {q_pe.dtype} / {kpe_cache.dtype} must equal q_nope's / "
                             f"ckv_cache's ({q_nope.dtype} / {ckv_cache.dtype})")
        _check_dtype("ckv_cache", ckv_cache, step["kv_dtype"])
        if int(ckv_cache.shape[-2]) != step["page_size"]:
            raise ValueError(f"ckv_cache: page size {ckv_cache.shape[-2]}, plan() gives page_size={step['page_size']}")

        q = _arrays.concat_last(q_nope, q_pe).reshape(b, s_q, h, d_c + d_r)
        joined = _arrays.joined_last_dim(ckv_cache, kpe_cache)
        if joined is not None:
            cache = mlakit.KvCache(joined, d_c=d_c, d_r=d_r)
        else:
            cache = mlakit.KvCache(ckv_cache, d_c=d_c, d_r=d_r, k_pe=kpe_cache)
        # A given out / lse must have FlashInfer's shapes: [rows, h, d_c] and [rows, h]. Any other shape with as many
        # elements would be filled in this layout and read back in its own, scrambled.
        for name, given, shape in (("out", out, (rows, h, d_c)), ("lse", lse, (rows, h))):
            if given is not None and tuple(int(s) for s in given.shape) != shape:
                layout = "[rows, h, d_c]" if name == "out" else "[rows, h]"
                raise ValueError(f"{name}: shape {tuple(given.shape)}, must be {shape} ({layout})")
        if out is None:
            out = _arrays.empty(q_nope, (rows, h, d_c))
        if return_lse and lse is None:
            lse = _arrays.empty(q_nope, (rows, h), _arrays.FLOAT32)
        out4 = _arrays.reshape_view(out, (b, s_q, h, d_c), "out")
        lse3 = None if lse is None else _arrays.reshape_view(lse, (b, s_q, h), "lse")  # a given lse is written

        decode_plan = self._plan_for(q, cache, out4, lse3, joined is not None)
        if self._stale or self._use_cuda_graph:
            decode_plan.plan(block_table=step["kv_indices"], seq_lens=step["kv_len_arr"],
                             block_table_indptr=step["kv_indptr"])
            self._stale = False
        decode_plan.run(q, cache, out4, lse3)
        if lse is not None and not return_lse_base_on_e:
            lse *= _LOG2E  # MLAKit's natural log -> FlashInfer's base 2; -inf stays -inf
        return (out, lse) if return_lse else out

    def _plan_for(self, q, cache, out4, lse3, joined: bool):
        """The DecodePlan of this step's shapes: made on the first run, again when a run's shapes differ."""
        step = self._step
        # Everything the DecodePlan fixes at construction: shapes, and plan()'s scale and mask.
        key = (tuple(int(s) for s in q.shape), str(q.dtype), cache.num_pages, cache.format, step["page_size"], joined,
               lse3 is None, step["sm_scale"], step["causal"])
        if self._decode_plan is None or self._plan_key != key:
            self._decode_plan = mlakit.DecodePlan(
                q, cache, step["kv_indices"], step["kv_len_arr"], out4, lse3,
                softmax_scale=step["sm_scale"], causal=step["causal"], block_table_indptr=step["kv_indptr"],
                workspace=self._workspace,
            )
            self._plan_key = key
            self._stale = True
        return self._decode_plan


def _check_dtype(name: str, x, expected) -> None:
    """FlashInfer's q_data_type / kv_data_type against the arrays run() gets (same kind of dtype object only)."""
    if expected is None or type(x.dtype) is not type(expected):
        return
    if x.dtype != expected:
        raise ValueError(f"{name}: dtype {x.dtype}, plan() gives {expected}")
