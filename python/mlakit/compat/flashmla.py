"""Drop-in replacement for FlashMLA's Python interface (``flash_mla``): change one import.

    # from flash_mla import get_mla_metadata, flash_mla_with_kvcache
    from mlakit.compat.flashmla import get_mla_metadata, flash_mla_with_kvcache

Shapes and conventions are FlashMLA's; every conversion to MLAKit's native ones happens here, at the
boundary, and is listed below. Arrays may be torch tensors (CPU or CUDA) or numpy arrays (CPU, with
``ml_dtypes.bfloat16`` for bf16); outputs are allocated in the framework and on the device of ``q``.

Conversions (FlashMLA -> MLAKit):

* ``k_cache [num_pages, page_size, 1, d_qk]`` bf16/fp16, or ``[num_pages, page_size, 1, 656]`` uint8
  (or float8_e4m3fn) when ``is_fp8_kvcache`` (DeepSeek's ``fp8_ds_mla`` row format): the unit KV-head
  dimension is dropped and the rows are viewed as bytes (``mlakit.KvCache``); no copy.
* ``head_dim_v`` is MLAKit's ``d_c``; ``d_r = q.shape[-1] - head_dim_v`` (512 / 64 for DeepSeek).
* DeepSeek V4 (FlashMLA's "MODEL1"): ``k_cache [num_blocks, block_size, 1, 584]`` uint8 (or float8_e4m3fn),
  a view over FlashMLA's padded pages, with ``is_fp8_kvcache`` and ``q.shape[-1] == head_dim_v == 512``, is
  MLAKit's ``fp8_ds_v4`` format with ``d_c = 448``, ``d_r = 64`` and V as the whole row
  (``KvCache(..., v_whole_row=True)``); no copy. ``extra_k_cache`` (same layout, its own page size),
  ``extra_indices_in_kvcache`` and ``extra_topk_length`` are its extra cache: one softmax over both id sets.
  Extra ids past the extra cache become ``-1`` as for ``indices``.
* ``softmax_lse`` is returned as FlashMLA's ``[b, h_q, s_q]`` (MLAKit computes ``[b, s_q, h_q]``; the
  result is a transposed copy), natural log, and ``+inf`` for a row with no visible key (MLAKit: ``-inf``).
  ``out`` is 0 for such rows in both.
* ``softmax_scale=None``: **FlashMLA's documented default, ``q.shape[-1] ** -0.5`` (1/sqrt(576) = 0.0417
  for DeepSeek), is applied and a** :class:`SoftmaxScaleDefaultWarning` **is raised**: it is *not*
  DeepSeek's scale (``mscale^2 / sqrt(192)`` = 0.1352 for V3, see ``mlakit.yarn_softmax_scale``). It is
  kept only so that results match FlashMLA's for the same call; pass ``softmax_scale`` explicitly (turn
  the warning into an error with ``warnings.simplefilter("error", SoftmaxScaleDefaultWarning)``).
* ``indices`` (sparse attention): global rows ``page * page_size + offset``. FlashMLA treats ``-1`` and
  any value ``>= num_pages * page_size`` as invalid; MLAKit treats negatives as invalid, so values past
  the cache become ``-1`` (in a copy of ``indices``). ``block_table`` and ``cache_seqlens`` are not used
  in sparse mode (as in FlashMLA), ``causal`` must be False.
* ``tile_scheduler_metadata`` / ``num_splits``: MLAKit plans its split-KV schedule itself. The
  ``tile_scheduler_metadata`` returned by :func:`get_mla_metadata` is an :class:`MlaMetadata` that holds
  the plan of one decoding step: the first call of the step plans (on the device, from
  ``cache_seqlens``), the calls of the following layers reuse it. ``num_splits`` is returned as ``None``
  and ignored when passed. Call ``get_mla_metadata`` once per step, as with FlashMLA.

``flash_mla_sparse_fwd`` (FlashMLA's sparse prefill) is served as sparse decode with ``b = s_q`` query tokens of
one token each over a one-page cache of ``s_kv`` rows; ``max_logits`` and ``lse`` follow FlashMLA's tests/ref.py.

Not served (raise ``TypeError``/``ValueError`` with the reason): keyword arguments FlashMLA does not have, the
extra cache without ``indices``, a KV-head count other than 1, ``causal=True`` with ``indices``, and metadata
objects made by the real FlashMLA.
"""

from __future__ import annotations

import warnings

import mlakit

from .. import _arrays

__all__ = [
    "MlaMetadata",
    "SoftmaxScaleDefaultWarning",
    "flash_mla_sparse_fwd",
    "flash_mla_with_kvcache",
    "get_mla_metadata",
]


_DS_V4_TOKEN_BYTES = 584  # fp8_ds_v4 bytes per token (docs/spec.md section 4)
_DS_V4_ROPE = 64


class SoftmaxScaleDefaultWarning(UserWarning):
    """``softmax_scale`` was omitted and FlashMLA's default ``1/sqrt(d_qk)`` was used (wrong for DeepSeek)."""


class MlaMetadata:
    """Stands in for FlashMLA's ``tile_scheduler_metadata``: the decode plan of one decoding step.

    Made by :func:`get_mla_metadata`; planned lazily by the first :func:`flash_mla_with_kvcache` call
    that receives it, reused by the following calls with the same arrays and shapes (one per layer).
    A call whose shapes, block table, lengths or scale differ re-plans.
    """

    def __init__(self, cache_seqlens=None):
        self.cache_seqlens = cache_seqlens
        self._plan = None
        self._key = None

    def _plan_for(self, key, make):
        if self._plan is None or self._key != key:
            self._plan = make()
            self._key = key
            self._plan.plan()
        return self._plan

    @property
    def backend(self):
        """Name of the backend the step was planned on (None before the first call)."""
        return None if self._plan is None else self._plan.backend

    def __repr__(self):
        return f"MlaMetadata(planned={self._plan is not None}, backend={self.backend!r})"


def get_mla_metadata(
    cache_seqlens=None,
    num_q_tokens_per_head_k=None,
    num_heads_k=None,
    num_heads_q=None,
    is_fp8_kvcache=False,
    topk=None,
):
    """FlashMLA's ``get_mla_metadata``: returns ``(tile_scheduler_metadata, num_splits)``.

    MLAKit schedules on the device when the step's first decode call runs, so the arguments are only
    accepted for compatibility; ``tile_scheduler_metadata`` is a fresh :class:`MlaMetadata` and
    ``num_splits`` is ``None``. Call it once per decoding step.
    """
    return MlaMetadata(cache_seqlens), None


def _resolve_scale(softmax_scale, q) -> float:
    if softmax_scale is not None:
        return float(softmax_scale)
    d_qk = int(q.shape[-1])
    scale = d_qk ** -0.5
    warnings.warn(
        f"softmax_scale=None: using FlashMLA's default 1/sqrt(q.shape[-1]) = 1/sqrt({d_qk}) = {scale:.6g}, "
        "which is NOT DeepSeek's softmax scale (mscale^2/sqrt(d_nope + d_r) = 0.13523378 for DeepSeek-V3; "
        "see mlakit.yarn_softmax_scale). Pass softmax_scale explicitly.",
        SoftmaxScaleDefaultWarning,
        stacklevel=3,
    )
    return scale


def _workspace(q):
    """An allocator for the native call's workspace: a uint8 array of the bytes it asks for, from q's framework on
    q's device (torch's caching allocator under torch, so that graph capture pools it), instead of the cudaMalloc
    the native call makes when it is given no workspace."""
    return lambda nbytes: _arrays.empty(q, (nbytes,), _arrays.UINT8)


def _shape_key(x):
    return None if x is None else (tuple(int(s) for s in x.shape), str(x.dtype), id(x))


def flash_mla_with_kvcache(
    q,
    k_cache,
    block_table,
    cache_seqlens,
    head_dim_v,
    tile_scheduler_metadata=None,
    num_splits=None,
    softmax_scale=None,
    causal=False,
    is_fp8_kvcache=False,
    indices=None,
    attn_sink=None,
    topk_length=None,
    extra_k_cache=None,
    extra_indices_in_kvcache=None,
    extra_topk_length=None,
    **unsupported,
):
    """FlashMLA's ``flash_mla_with_kvcache``: returns ``(out, softmax_lse)``.

    q: ``[b, s_q, h_q, d_qk]`` bf16/fp16. k_cache: ``[num_pages, page_size, 1, d_qk]`` in q's dtype, or
    ``[num_pages, page_size, 1, 656]`` uint8 when ``is_fp8_kvcache``. block_table: int32
    ``[b, max_pages]``; cache_seqlens: int32 ``[b]`` (dense mode). indices: int32 ``[b, s_q, topk]``
    (sparse mode). attn_sink: float32 ``[h_q]``, topk_length: int32 ``[b]`` (sparse mode). DeepSeek V4:
    k_cache ``[num_blocks, block_size, 1, 584]`` bytes with head_dim_v = 512, and optionally the extra cache
    (extra_k_cache, extra_indices_in_kvcache ``[b, s_q, extra_topk]``, extra_topk_length ``[b]``).
    Returns out ``[b, s_q, h_q, head_dim_v]`` (q's dtype) and softmax_lse float32 ``[b, h_q, s_q]``
    (``+inf`` for rows with no key). See the module docstring for every conversion.
    """
    if unsupported:
        names = ", ".join(sorted(unsupported))
        raise TypeError(f"flash_mla_with_kvcache: unexpected keyword argument(s) {names} (not FlashMLA's)")
    if tile_scheduler_metadata is not None and not isinstance(tile_scheduler_metadata, MlaMetadata):
        raise TypeError(
            "tile_scheduler_metadata: expected the MlaMetadata returned by mlakit.compat.flashmla.get_mla_metadata "
            f"(got {type(tile_scheduler_metadata).__name__}); do not mix FlashMLA's and MLAKit's get_mla_metadata"
        )
    scale = _resolve_scale(softmax_scale, q)
    b, s_q, h_q, d_qk = (int(s) for s in q.shape)
    d_v = int(head_dim_v)
    if is_fp8_kvcache and int(k_cache.shape[-1]) == _DS_V4_TOKEN_BYTES and d_v == d_qk:
        fmt, d_c, v_whole_row = "fp8_ds_v4", d_qk - _DS_V4_ROPE, True  # DeepSeek V4: 448 + 64, V = the whole row
    else:
        fmt, d_c, v_whole_row = ("fp8_ds_mla" if is_fp8_kvcache else None), d_v, False
    dims = {"d_c": d_c, "d_r": d_qk - d_c, "v_whole_row": v_whole_row}
    cache = mlakit.KvCache(k_cache, fmt, **dims)
    extra = (extra_k_cache, extra_indices_in_kvcache, extra_topk_length)
    if any(x is not None for x in extra):
        if indices is None:
            raise ValueError("extra_k_cache / extra_indices_in_kvcache / extra_topk_length: sparse mode only (pass indices)")
        if extra_k_cache is None or extra_indices_in_kvcache is None:
            raise ValueError("the extra cache needs both extra_k_cache and extra_indices_in_kvcache")
    out = _arrays.empty(q, (b, s_q, h_q, d_v))
    lse = _arrays.empty(q, (b, s_q, h_q), _arrays.FLOAT32)  # MLAKit's layout; converted below

    if indices is not None:
        if causal:
            raise ValueError("causal=True: sparse attention (indices given) has no causal mask in FlashMLA; pass causal=False")
        valid_rows = cache.num_pages * cache.page_size
        extra_kwargs = {}
        if extra_k_cache is not None:
            extra_cache = mlakit.KvCache(extra_k_cache, fmt, **dims)
            extra_kwargs = {
                "extra_kv_cache": extra_cache,
                "extra_indices": _arrays.where_ge_to_minus_one(
                    extra_indices_in_kvcache, extra_cache.num_pages * extra_cache.page_size
                ),
                "extra_topk_length": extra_topk_length,
            }
        mlakit.sparse_decode(
            q,
            cache,
            _arrays.where_ge_to_minus_one(indices, valid_rows),
            out,
            lse,
            softmax_scale=scale,
            topk_length=topk_length,
            attn_sink=attn_sink,
            workspace=_workspace(q),
            **extra_kwargs,
        )
    else:
        if attn_sink is not None or topk_length is not None:
            raise ValueError("attn_sink / topk_length: only meaningful in sparse mode (pass indices)")

        def make_plan():
            # The workspace comes from q's framework (so that torch's graph capture pools it), sized by the plan
            # itself once it has chosen its backend: one validation instead of a size query first.
            return mlakit.DecodePlan(q, cache, block_table, cache_seqlens, out, lse, softmax_scale=scale,
                                     causal=bool(causal), workspace=_workspace(q))

        if tile_scheduler_metadata is None:
            plan = make_plan()
            plan.plan()
        else:
            key = (
                _shape_key(q)[:2],
                _shape_key(k_cache)[:2],
                _shape_key(block_table),
                _shape_key(cache_seqlens),
                scale,
                bool(causal),
                bool(is_fp8_kvcache),
                d_v,
            )
            plan = tile_scheduler_metadata._plan_for(key, make_plan)
        plan.run(q, cache, out, lse)

    lse = _arrays.contiguous_swap_last_two(lse)  # [b, s_q, h_q] -> FlashMLA's [b, h_q, s_q]
    _arrays.neg_inf_to_pos_inf(lse)  # empty rows: MLAKit -inf (ln 0) -> FlashMLA +inf
    return out, lse


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None):
    """FlashMLA's sparse prefill ``flash_mla_sparse_fwd``: returns ``(out, max_logits, lse)``.

    q: ``[s_q, h_q, d_qk]`` bf16; kv: ``[s_kv, 1, d_qk]`` bf16 (one latent KV head); indices: int32
    ``[s_q, 1, topk]``, rows of kv, ``-1`` or ``>= s_kv`` invalid; attn_sink: float32 ``[h_q]``; topk_length:
    int32 ``[s_q]``. ``d_v = 512``: V is the first 512 columns of each row (V3.2, ``d_qk = 576``) or the whole row
    (V4, ``d_qk = 512``). Returns out ``[s_q, h_q, d_v]`` (q's dtype), max_logits and lse float32 ``[s_q, h_q]``:
    the largest ``sm_scale * <q, k>`` and the natural-log LSE over the valid keys, without the sink (FlashMLA's
    tests/ref.py); a row with no valid key gets ``max_logits = -inf``, ``lse = +inf`` and ``out = 0``.

    MLAKit runs it as sparse decode with one query token per request (``b = s_q``) over a cache of one page of
    ``s_kv`` rows, viewing the caller's arrays without copying them.
    """
    s_q, h_q, d_qk = (int(x) for x in q.shape)
    s_kv, h_kv, kv_dim = (int(x) for x in kv.shape)
    if h_kv != 1:
        raise ValueError(f"kv.shape[1]={h_kv}: MLA has one latent KV head (h_kv must be 1)")
    if kv_dim != d_qk:
        raise ValueError(f"kv.shape[2]={kv_dim}: must equal q.shape[2]={d_qk}")
    d_v = int(d_v)
    v_whole_row = d_v == d_qk  # DeepSeek V4: 448 + 64, V = the whole row
    d_c = d_qk - _DS_V4_ROPE if v_whole_row else d_v
    cache = mlakit.KvCache(kv.reshape(1, s_kv, 1, d_qk), d_c=d_c, d_r=d_qk - d_c, v_whole_row=v_whole_row)
    topk = int(indices.shape[-1])
    out = _arrays.empty(q, (s_q, 1, h_q, d_v))
    lse = _arrays.empty(q, (s_q, 1, h_q), _arrays.FLOAT32)
    max_logits = _arrays.empty(q, (s_q, 1, h_q), _arrays.FLOAT32)
    mlakit.sparse_decode(
        q.reshape(s_q, 1, h_q, d_qk),
        cache,
        _arrays.where_ge_to_minus_one(indices, s_kv).reshape(s_q, 1, topk),
        out,
        lse,
        softmax_scale=float(sm_scale),
        topk_length=topk_length,
        attn_sink=attn_sink,
        max_logits=max_logits,
        workspace=_workspace(q),
    )
    lse = _arrays.neg_inf_to_pos_inf(lse.reshape(s_q, h_q))  # a row with no key: MLAKit -inf -> FlashMLA +inf
    return out.reshape(s_q, h_q, d_v), max_logits.reshape(s_q, h_q), lse
