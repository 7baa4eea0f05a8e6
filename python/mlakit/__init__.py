"""MLAKit: Multi-head Latent Attention (DeepSeek-V2/V3 MLA) kernels for any DLPack array.

Every operation takes numpy, torch, cupy or any other DLPack array, on the CPU (the reference backend)
or on a CUDA device (the CUDA backends), writes into outputs the caller allocated, and runs on the
caller's stream: the explicit ``stream=`` argument (an int handle, a ``torch.cuda.Stream`` or a cupy
stream) or, when omitted, the current stream of the arrays' framework (torch, cupy).

Invalid calls raise ``ValueError`` with the C++ message naming field, value and rule; a valid call no
backend can serve raises ``NotSupportedError`` saying why each backend declined. Nothing is checked
twice: the C++ library validates, this package only converts.

Conventions are MLAKit's own (see docs/spec.md): LSE is the natural log, laid out ``[b, s_q, h_q]``, and is
``-inf`` for a row with no visible key; ``softmax_scale`` has no default. ``mlakit.compat.flashmla``
converts to FlashMLA's conventions for engines that call FlashMLA.

numpy has no bf16 / fp8 dtypes: use ``ml_dtypes.bfloat16`` and ``ml_dtypes.float8_e4m3fn`` arrays.
"""

from __future__ import annotations

from . import _native
from ._native import (
    BackendInfo,
    CudaError,
    DecodePlan,
    KvCache,
    NotSupportedError,
    Selection,
    append_kv,
    backends,
    build_info,
    decode,
    decode_plan_step,
    decode_run_step,
    decode_workspace_bytes,
    gather_kv,
    merge,
    merge_pair,
    prefill,
    rope,
    shard_seq_lens,
    shard_slot_mapping,
    sparse_decode,
    sparse_decode_workspace_bytes,
    yarn_cos_sin_table,
    yarn_inv_freq,
    yarn_mscale,
    yarn_softmax_scale,
)

__version__: str = _native.version()

#: Operation names accepted by :func:`select` (docs/spec.md sections 1-8).
OPS = ("decode", "sparse_decode", "prefill", "merge", "merge_pair", "append_kv", "rope", "gather_kv")


def select(op: str, *args, **kwargs) -> Selection:
    """Which backend would run ``op`` with these arguments, and why every other backend was passed over.

    Takes exactly the arguments of the operation itself (``backend=`` included), runs nothing::

        s = mlakit.select("decode", q, cache, block_table, seq_lens, out, softmax_scale=tau)
        s.backend        # 'reference', or None when no backend can serve the call
        s.passed_over    # [(backend, reason), ...]
        print(s.explain())

    Raises ``ValueError`` when the call itself is invalid (the same message the operation would raise).
    """
    if op not in OPS:
        raise ValueError(f"op={op!r}: must be one of {', '.join(OPS)}")
    return getattr(_native, "select_" + op)(*args, **kwargs)


def yarn_from_config(config: dict) -> dict:
    """Keyword arguments of :func:`yarn_cos_sin_table` from a DeepSeek ``config.json`` (as a dict).

    Reads ``qk_rope_head_dim``, ``rope_theta`` and ``rope_scaling`` (``factor``,
    ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``, ``mscale``, ``mscale_all_dim``).
    A config without ``rope_scaling`` gives plain RoPE (factor 1). Missing keys raise ``KeyError``:
    nothing is guessed.
    """
    scaling = config.get("rope_scaling") or {}
    kwargs = {"d_r": int(config["qk_rope_head_dim"]), "base": float(config["rope_theta"])}
    if not scaling:
        kwargs.update(factor=1.0)
        return kwargs
    kwargs.update(
        factor=float(scaling["factor"]),
        orig_max_pos=int(scaling["original_max_position_embeddings"]),
        beta_fast=float(scaling["beta_fast"]),
        beta_slow=float(scaling["beta_slow"]),
        mscale=float(scaling["mscale"]),
        mscale_all_dim=float(scaling["mscale_all_dim"]),
    )
    return kwargs


__all__ = [
    "OPS",
    "BackendInfo",
    "CudaError",
    "DecodePlan",
    "KvCache",
    "NotSupportedError",
    "Selection",
    "append_kv",
    "backends",
    "build_info",
    "decode",
    "decode_plan_step",
    "decode_run_step",
    "decode_workspace_bytes",
    "gather_kv",
    "merge",
    "merge_pair",
    "prefill",
    "rope",
    "select",
    "shard_seq_lens",
    "shard_slot_mapping",
    "sparse_decode",
    "sparse_decode_workspace_bytes",
    "yarn_cos_sin_table",
    "yarn_from_config",
    "yarn_inv_freq",
    "yarn_mscale",
    "yarn_softmax_scale",
]
