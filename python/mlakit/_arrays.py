"""Framework-neutral helpers for the Python layer: allocate an array "like" a caller's array (same
framework and device), and a few element-wise conversions the compat module needs.

Supported frameworks: numpy (with ml_dtypes for bf16), torch, cupy. Nothing here imports torch or
cupy: an array of theirs can only exist once the caller has imported them.
"""

from __future__ import annotations

import sys

import numpy as np

#: dtype names used by the helpers below
SAME = "same"
FLOAT32 = "float32"
UINT8 = "uint8"
INT32 = "int32"


def is_torch(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_cupy(x) -> bool:
    return type(x).__module__.startswith("cupy")


def empty(like, shape, dtype: str = SAME):
    """An uninitialised array of `shape` in `like`'s framework and on its device.

    `dtype` is SAME (like's dtype), FLOAT32, UINT8 or INT32.
    """
    shape = tuple(int(s) for s in shape)
    if is_torch(like):
        import torch

        t = {SAME: like.dtype, FLOAT32: torch.float32, UINT8: torch.uint8, INT32: torch.int32}[dtype]
        return torch.empty(shape, dtype=t, device=like.device)
    if is_cupy(like):
        import cupy

        return cupy.empty(shape, dtype=like.dtype if dtype == SAME else dtype)
    return np.empty(shape, dtype=np.asarray(like).dtype if dtype == SAME else dtype)


def contiguous_swap_last_two(x):
    """A contiguous copy of `x` with its last two dimensions swapped."""
    if is_torch(x):
        return x.transpose(-1, -2).contiguous()
    if is_cupy(x):
        import cupy

        return cupy.ascontiguousarray(cupy.swapaxes(x, -1, -2))
    return np.ascontiguousarray(np.swapaxes(x, -1, -2))


def neg_inf_to_pos_inf(x):
    """Replaces -inf by +inf in place (a masked fill: no host synchronisation, CUDA-graph safe)."""
    if is_torch(x):
        x.masked_fill_(x == float("-inf"), float("inf"))
    elif is_cupy(x):
        import cupy

        cupy.putmask(x, x == -cupy.inf, cupy.inf)
    else:
        np.putmask(x, x == -np.inf, np.inf)
    return x


def where_ge_to_minus_one(x, limit: int):
    """`x` with every value >= `limit` replaced by -1 (a new array; `x` is not modified)."""
    if is_torch(x):
        return x.masked_fill(x >= limit, -1)
    if is_cupy(x):
        import cupy

        return cupy.where(x >= limit, -1, x).astype(x.dtype)
    return np.where(x >= limit, np.int32(-1), x).astype(x.dtype)
