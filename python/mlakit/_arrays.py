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

        with like.device:  # cupy allocates on its current device, which need not be like's
            return cupy.empty(shape, dtype=like.dtype if dtype == SAME else dtype)
    return np.empty(shape, dtype=np.asarray(like).dtype if dtype == SAME else dtype)


def contiguous_swap_last_two(x):
    """A contiguous copy of `x` with its last two dimensions swapped."""
    if is_torch(x):
        return x.transpose(-1, -2).contiguous()
    if is_cupy(x):
        import cupy

        with x.device:
            return cupy.ascontiguousarray(cupy.swapaxes(x, -1, -2))
    return np.ascontiguousarray(np.swapaxes(x, -1, -2))


def neg_inf_to_pos_inf(x):
    """Replaces -inf by +inf in place (a masked fill: no host synchronisation, CUDA-graph safe)."""
    if is_torch(x):
        x.masked_fill_(x == float("-inf"), float("inf"))
    elif is_cupy(x):
        import cupy

        with x.device:
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

        with x.device:
            return cupy.where(x >= limit, -1, x).astype(x.dtype)
    return np.where(x >= limit, np.int32(-1), x).astype(x.dtype)


def concat_last(a, b):
    """`a` and `b` joined along their last dimension (a new array)."""
    if is_torch(a):
        import torch

        return torch.cat([a, b], dim=-1)
    if is_cupy(a):
        import cupy

        with a.device:
            return cupy.concatenate([a, b], axis=-1)
    return np.concatenate([np.asarray(a), np.asarray(b)], axis=-1)


def reshape_view(x, shape, name: str):
    """`x` reshaped to `shape` without copying (an output the caller passed must be written in place)."""
    shape = tuple(int(s) for s in shape)
    if is_torch(x):
        try:
            return x.view(shape)
        except RuntimeError as e:
            raise ValueError(f"{name}: {tuple(x.shape)} cannot be viewed as {shape} without a copy ({e})") from None
    v = x.reshape(shape)
    copied = data_ptr(v) != data_ptr(x) if is_cupy(x) else not np.shares_memory(v, x)
    if v.size and copied:
        raise ValueError(f"{name}: {tuple(x.shape)} cannot be viewed as {shape} without a copy")
    return v


def to_host_ints(x):
    """`x` as a numpy int64 array on the host (a device array is copied back: a synchronisation)."""
    if is_torch(x):
        return x.detach().to("cpu").numpy().astype(np.int64)
    if is_cupy(x):
        return x.get().astype(np.int64)
    return np.asarray(x).astype(np.int64)


def int32_like(x, like):
    """`x` as an int32 array on `like`'s device and framework (no copy when it already is one)."""
    if is_torch(like):
        import torch

        if not is_torch(x):
            x = torch.as_tensor(np.asarray(x))
        return x.to(device=like.device, dtype=torch.int32, non_blocking=True)
    if is_cupy(like):
        import cupy

        with like.device:
            return cupy.asarray(x, dtype=cupy.int32)
    x = to_host_ints(x) if (is_torch(x) or is_cupy(x)) else np.asarray(x)
    return x if x.dtype == np.int32 else x.astype(np.int32)


def copy_into(dst, src):
    """Copies `src` into the leading elements of `dst` in place (stream-ordered on a device: no synchronisation)."""
    n = int(src.shape[0])
    if is_torch(dst):
        dst[:n].copy_(src, non_blocking=True)
    else:
        dst[:n] = src


def as_bytes(x):
    """A flat uint8 view of the contiguous array `x` (a workspace buffer of any dtype)."""
    contiguous = x.is_contiguous() if is_torch(x) else x.flags.c_contiguous
    if not contiguous:
        raise ValueError("workspace buffer: must be contiguous (its bytes are used in place)")
    if is_torch(x):
        import torch

        return x.reshape(-1).view(torch.uint8)
    return x.reshape(-1).view(np.uint8)


def data_ptr(x) -> int:
    if is_torch(x):
        return int(x.data_ptr())
    if is_cupy(x):
        return int(x.data.ptr)
    return int(np.asarray(x).__array_interface__["data"][0])


def strides_in_elements(x):
    if is_torch(x):
        return tuple(int(s) for s in x.stride())
    return tuple(int(s) // x.itemsize for s in x.strides)


def joined_last_dim(a, b):
    """When `b` holds the columns right after `a`'s in one array (two column slices of one [..., d_a + d_b] array),
    that array as one view over both; else None (always for cupy arrays). Never copies."""
    if type(a) is not type(b) or a.dtype != b.dtype or a.ndim != b.ndim or tuple(a.shape[:-1]) != tuple(b.shape[:-1]):
        return None
    strides = strides_in_elements(a)
    if strides != strides_in_elements(b) or strides[-1] != 1:
        return None
    itemsize = a.element_size() if is_torch(a) else a.itemsize
    if data_ptr(b) != data_ptr(a) + int(a.shape[-1]) * itemsize:
        return None
    width = int(a.shape[-1]) + int(b.shape[-1])
    if any(0 < s < width for s in strides[:-1]):
        return None  # a joined row would run into the next one
    shape = tuple(int(s) for s in a.shape[:-1]) + (width,)
    if is_torch(a):
        if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
            return None
        return a.as_strided(shape, strides)
    if is_cupy(a) or a.base is None or a.base is not b.base:
        return None
    return np.lib.stride_tricks.as_strided(a, shape, a.strides)
