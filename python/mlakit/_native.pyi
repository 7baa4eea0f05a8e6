"""
MLAKit bindings: DLPack arrays in, C++ problems validated and run by the chosen backend.
"""

from typing import Annotated

import numpy
from numpy.typing import NDArray

from typing import Any, Union

# Any DLPack-capable array (numpy incl. ml_dtypes bf16/fp8, torch, cupy, ...): shapes and dtypes are
# checked by the C++ library, which raises ValueError naming field, value and rule.
ArrayLike = Any
# A CUDA stream: an int handle, a torch.cuda.Stream or a cupy stream; None = the arrays' current stream.
StreamLike = Any
# A workspace: a contiguous uint8 array (at least the bytes *_workspace_bytes() gives), or a callable that takes
# that byte count and returns one (a framework's allocator), asked once the call is validated and its backend chosen.
WorkspaceLike = Any


class NotSupportedError(NotImplementedError):
    """The call is valid but the chosen backend (or every backend) cannot serve it; the message says why."""

class CudaError(RuntimeError):
    """A CUDA API call or kernel launch failed."""


class KvCache:
    """
    A paged latent KV cache over a caller's array (docs/spec.md section 4), or over two arrays (k_pe=: the split form). The arrays are kept alive by this object and never copied. v_whole_row: V is the whole row (DeepSeek V4, d_c=448, d_r=64; sparse decode only).
    """

    def __init__(self, pages: ArrayLike, format: str | None = None, *, d_c: int = 512, d_r: int = 64, kv_scale: float | ArrayLike | None = None, v_whole_row: bool = False, k_pe: ArrayLike | None = None) -> None:
        """
        k_pe: the split form, the RoPE columns in their own array (pages then holds the d_c latent columns).
        """

    @property
    def format(self) -> str: ...

    @property
    def num_pages(self) -> int: ...

    @property
    def page_size(self) -> int: ...

    @property
    def row_bytes(self) -> int: ...

    @property
    def d_c(self) -> int: ...

    @property
    def d_r(self) -> int: ...

    @property
    def v_whole_row(self) -> bool: ...

    @property
    def device(self) -> str: ...

    @property
    def pages(self) -> ArrayLike: ...

    @property
    def k_pe(self) -> ArrayLike | None:
        """the RoPE part of a split cache (None when joined)"""

    @property
    def split(self) -> bool: ...

    def __repr__(self) -> str: ...

class BackendInfo:
    """One backend compiled into this build (mlakit.backends())."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def device(self) -> str:
        """'cpu' or 'cuda': the device whose arrays it takes"""

    @property
    def priority(self) -> int:
        """automatic selection prefers higher values"""

    @property
    def features(self) -> list[tuple[str, str]]:
        """(op, detail) pairs: what it implements"""

    @property
    def available(self) -> bool:
        """whether it can run on this machine (for a CUDA backend: on the current device)"""

    @property
    def unavailable_reason(self) -> str:
        """why not, when available is False"""

    def __repr__(self) -> str: ...

class Selection:
    """Which backend a call would run on (mlakit.select())."""

    @property
    def backend(self) -> str | None:
        """the chosen backend's name, None when none can serve the call"""

    @property
    def reason(self) -> str:
        """why nothing was chosen ('' when a backend was)"""

    @property
    def passed_over(self) -> list[tuple[str, str]]:
        """(backend, reason) for every backend not chosen"""

    def explain(self) -> str:
        """multi-line explanation"""

    def __bool__(self) -> bool: ...

    def __repr__(self) -> str: ...

def backends() -> list[BackendInfo]:
    """
    Every backend compiled into this build, highest priority first (unavailable ones included, with why).
    """

def decode(q: ArrayLike, kv_cache: ArrayLike, block_table: ArrayLike, seq_lens: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, causal: bool = False, shard: tuple[int, ...] | None = None, block_table_indptr: ArrayLike | None = None, workspace: WorkspaceLike | None = None, backend: str | None = None, stream: StreamLike | None = None) -> None:
    """
    Dense decode (docs/spec.md section 1) in one call: plans and runs with a temporary workspace. Engines decoding many layers per step should use DecodePlan.
    """

def select_decode(q: ArrayLike, kv_cache: ArrayLike, block_table: ArrayLike, seq_lens: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, causal: bool = False, shard: tuple[int, ...] | None = None, block_table_indptr: ArrayLike | None = None, workspace: WorkspaceLike | None = None, backend: str | None = None, stream: StreamLike | None = None) -> Selection:
    """
    Which backend the same call would run on, and why every other one was passed over. Nothing runs.
    """

def decode_workspace_bytes(q: ArrayLike, kv_cache: ArrayLike, block_table: ArrayLike, seq_lens: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, causal: bool = False, shard: tuple[int, ...] | None = None, block_table_indptr: ArrayLike | None = None, workspace: WorkspaceLike | None = None, backend: str | None = None, stream: StreamLike | None = None) -> int:
    """
    Bytes of workspace the chosen backend needs for this call (pass workspace= a uint8 array that large, e.g. allocated by your framework so that CUDA graph capture sees it). Nothing runs.
    """

def decode_plan_step(q: ArrayLike, kv_cache: ArrayLike, block_table: ArrayLike, seq_lens: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, causal: bool = False, shard: tuple[int, ...] | None = None, block_table_indptr: ArrayLike | None = None, workspace: ArrayLike, backend: str | None = None, stream: StreamLike | None = None) -> None:
    """
    The plan half of decode: writes this step's schedule into workspace (from seq_lens, on the device).
    """

def decode_run_step(q: ArrayLike, kv_cache: ArrayLike, block_table: ArrayLike, seq_lens: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, causal: bool = False, shard: tuple[int, ...] | None = None, block_table_indptr: ArrayLike | None = None, workspace: ArrayLike, backend: str | None = None, stream: StreamLike | None = None) -> None:
    """
    The run half of decode: reads the schedule decode_plan_step left in workspace.
    """

def sparse_decode(q: ArrayLike, kv_cache: ArrayLike, indices: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, topk_length: ArrayLike | None = None, attn_sink: ArrayLike | None = None, extra_kv_cache: ArrayLike | None = None, extra_indices: ArrayLike | None = None, extra_topk_length: ArrayLike | None = None, max_logits: ArrayLike | None = None, workspace: WorkspaceLike | None = None, backend: str | None = None, stream: StreamLike | None = None) -> None:
    """
    Sparse top-k decode over global row ids (docs/spec.md section 2); with extra_kv_cache and extra_indices (DeepSeek V4), one softmax over the ids of both caches.
    """

def select_sparse_decode(q: ArrayLike, kv_cache: ArrayLike, indices: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, topk_length: ArrayLike | None = None, attn_sink: ArrayLike | None = None, extra_kv_cache: ArrayLike | None = None, extra_indices: ArrayLike | None = None, extra_topk_length: ArrayLike | None = None, max_logits: ArrayLike | None = None, workspace: WorkspaceLike | None = None, backend: str | None = None, stream: StreamLike | None = None) -> Selection:
    """
    Which backend the same call would run on, and why every other one was passed over. Nothing runs.
    """

def sparse_decode_workspace_bytes(q: ArrayLike, kv_cache: ArrayLike, indices: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, topk_length: ArrayLike | None = None, attn_sink: ArrayLike | None = None, extra_kv_cache: ArrayLike | None = None, extra_indices: ArrayLike | None = None, extra_topk_length: ArrayLike | None = None, max_logits: ArrayLike | None = None, workspace: WorkspaceLike | None = None, backend: str | None = None, stream: StreamLike | None = None) -> int:
    """
    Bytes of workspace the chosen backend needs for this call (pass workspace= a uint8 array that large, e.g. allocated by your framework so that CUDA graph capture sees it). Nothing runs.
    """

def prefill(q: ArrayLike, k: ArrayLike, v: ArrayLike, cu_seqlens_q: ArrayLike, cu_seqlens_k: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, causal: bool = False, backend: str | None = None, stream: StreamLike | None = None) -> None:
    """Ragged prefill in the non-absorbed MHA form (docs/spec.md section 3)."""

def select_prefill(q: ArrayLike, k: ArrayLike, v: ArrayLike, cu_seqlens_q: ArrayLike, cu_seqlens_k: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, causal: bool = False, backend: str | None = None, stream: StreamLike | None = None) -> Selection:
    """
    Which backend the same call would run on, and why every other one was passed over. Nothing runs.
    """

def merge(parts_out: ArrayLike, parts_lse: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, backend: str | None = None, stream: StreamLike | None = None) -> None:
    """
    Merges n partial attention states (docs/spec.md section 6). In place when out/lse alias part 0.
    """

def select_merge(parts_out: ArrayLike, parts_lse: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, backend: str | None = None, stream: StreamLike | None = None) -> Selection:
    """
    Which backend the same call would run on, and why every other one was passed over. Nothing runs.
    """

def merge_pair(out_a: ArrayLike, lse_a: ArrayLike, out_b: ArrayLike, lse_b: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, backend: str | None = None, stream: StreamLike | None = None) -> None:
    """
    Merges two partial attention states (docs/spec.md section 6). In place when out/lse alias out_a/lse_a.
    """

def select_merge_pair(out_a: ArrayLike, lse_a: ArrayLike, out_b: ArrayLike, lse_b: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, backend: str | None = None, stream: StreamLike | None = None) -> Selection:
    """
    Which backend the same call would run on, and why every other one was passed over. Nothing runs.
    """

def append_kv(kv_c: ArrayLike, k_pe: ArrayLike, slot_mapping: ArrayLike, kv_cache: ArrayLike, *, positions: ArrayLike | None = None, cos_sin: ArrayLike | None = None, rope_style: str = 'interleaved', q: ArrayLike | None = None, q_fp8: ArrayLike | None = None, q_scale: float | ArrayLike | None = None, backend: str | None = None, stream: StreamLike | None = None) -> None:
    """
    Writes new tokens into the paged cache (docs/spec.md section 7), optionally rotating k_pe (and q in place) with RoPE and emitting q in fp8.
    """

def select_append_kv(kv_c: ArrayLike, k_pe: ArrayLike, slot_mapping: ArrayLike, kv_cache: ArrayLike, *, positions: ArrayLike | None = None, cos_sin: ArrayLike | None = None, rope_style: str = 'interleaved', q: ArrayLike | None = None, q_fp8: ArrayLike | None = None, q_scale: float | ArrayLike | None = None, backend: str | None = None, stream: StreamLike | None = None) -> Selection:
    """
    Which backend the same call would run on, and why every other one was passed over. Nothing runs.
    """

def rope(x: ArrayLike, positions: ArrayLike, cos_sin: ArrayLike, *, style: str = 'interleaved', backend: str | None = None, stream: StreamLike | None = None) -> None:
    """Applies RoPE to x in place (docs/spec.md section 7)."""

def select_rope(x: ArrayLike, positions: ArrayLike, cos_sin: ArrayLike, *, style: str = 'interleaved', backend: str | None = None, stream: StreamLike | None = None) -> Selection:
    """
    Which backend the same call would run on, and why every other one was passed over. Nothing runs.
    """

def gather_kv(kv_cache: ArrayLike, block_table: ArrayLike, seq_lens: ArrayLike, cu_out: ArrayLike, out: ArrayLike, *, backend: str | None = None, stream: StreamLike | None = None) -> None:
    """
    Dequantised cache rows of every request, concatenated, as bf16 (docs/spec.md section 8).
    """

def select_gather_kv(kv_cache: ArrayLike, block_table: ArrayLike, seq_lens: ArrayLike, cu_out: ArrayLike, out: ArrayLike, *, backend: str | None = None, stream: StreamLike | None = None) -> Selection:
    """
    Which backend the same call would run on, and why every other one was passed over. Nothing runs.
    """

def shard_seq_lens(seq_lens: ArrayLike, local_seq_lens: ArrayLike, *, shard: tuple[int, ...], stream: StreamLike | None = None) -> None:
    """
    local_seq_lens[b] = the tokens of request b (global length seq_lens[b]) that this rank holds (docs/spec.md section 11).
    """

def shard_slot_mapping(positions: ArrayLike, query_start_loc: ArrayLike, block_table: ArrayLike, slot_mapping: ArrayLike, *, shard: tuple[int, ...], page_size: int, stream: StreamLike | None = None) -> None:
    """
    append_kv's slot_mapping for this rank: each new token it owns goes to its local slot, every other token to -1 (docs/spec.md section 11).
    """

class DecodePlan:
    """
    Dense decode split into plan (once per step) and run (once per layer), holding its workspace (docs/spec.md section 9). Build it with the largest batch it will serve.
    """

    def __init__(self, q: ArrayLike, kv_cache: ArrayLike, block_table: ArrayLike, seq_lens: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, softmax_scale: float, causal: bool = False, shard: tuple[int, ...] | None = None, block_table_indptr: ArrayLike | None = None, backend: str | None = None, workspace: WorkspaceLike | None = None) -> None: ...

    def plan(self, *, block_table: ArrayLike | None = None, seq_lens: ArrayLike | None = None, block_table_indptr: ArrayLike | None = None, stream: StreamLike | None = None) -> None:
        """
        Computes this step's split-KV schedule on the device from seq_lens (no host synchronisation).
        """

    def run(self, q: ArrayLike, kv_cache: ArrayLike, out: ArrayLike, lse: ArrayLike | None = None, *, stream: StreamLike | None = None) -> None:
        """Runs decode for one layer with the schedule of the last plan()."""

    @property
    def backend(self) -> str:
        """the backend chosen at construction"""

    @property
    def workspace_bytes(self) -> int: ...

def yarn_cos_sin_table(max_pos: int, *, d_r: int = 64, base: float = 10000.0, factor: float = 40.0, orig_max_pos: int = 4096, beta_fast: float = 32.0, beta_slow: float = 1.0, mscale: float = 1.0, mscale_all_dim: float = 1.0) -> Annotated[NDArray[numpy.float32], dict(shape=(None, None))]:
    """
    float32 [max_pos, d_r] numpy array: row p = [cos(p*theta'_i) | sin(p*theta'_i)] * mscale ratio (docs/spec.md section 7). Copy it to the device for CUDA backends.
    """

def yarn_softmax_scale(*, d_nope: int = 128, d_r: int = 64, factor: float = 40.0, mscale_all_dim: float = 1.0) -> float:
    """
    tau = mscale(factor, mscale_all_dim)^2 / sqrt(d_nope + d_r); DeepSeek-V3: 0.13523378.
    """

def yarn_mscale(factor: float, mscale: float) -> float:
    """0.1 * mscale * ln(factor) + 1 (1 when factor <= 1)."""

def yarn_inv_freq(*, d_r: int = 64, base: float = 10000.0, factor: float = 40.0, orig_max_pos: int = 4096, beta_fast: float = 32.0, beta_slow: float = 1.0) -> list[float]:
    """theta'_i for i in [0, d_r/2) (docs/spec.md section 7)."""

def version() -> str:
    """MLAKit version, e.g. '0.1.0'."""

def build_info() -> str:
    """Build options, e.g. 'cuda=ON archs=80;90a'."""
