"""Package surface: error types and messages, selection, backends, cache views, type stubs, and the
example of docs/python.md (run as written)."""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest
from conftest import BF16, FP8, REPO_ROOT

import mlakit
from mlakit import _native

TAU = 0.13523378


def decode_args(b=2, h_q=4, page_size=16, num_pages=4, **override):
    args = dict(
        q=np.zeros((b, 1, h_q, 576), BF16),
        kv_cache=np.zeros((num_pages, page_size, 576), BF16),
        block_table=np.zeros((b, 2), np.int32),
        seq_lens=np.ones(b, np.int32),
        out=np.zeros((b, 1, h_q, 512), BF16),
        lse=np.zeros((b, 1, h_q), np.float32),
        softmax_scale=TAU,
    )
    args.update(override)
    return args


@pytest.mark.parametrize(
    "override,pattern",
    [
        (dict(softmax_scale=-1.0), r"softmax_scale=-1.*finite and > 0"),
        (dict(block_table=np.zeros((2, 2), np.int64)), r"block_table.dtype=int64.*int32"),
        (dict(kv_cache=np.zeros((4, 48, 576), BF16)), r"page_size=48.*power of two"),
        (dict(q=np.zeros((2, 1, 4, 576), np.float32)), r"q.dtype=fp32"),
        (dict(out=np.zeros((2, 1, 4, 500), BF16)), r"out"),
        (dict(seq_lens=np.array([1, 999], np.int32)), r"seq_lens"),
    ],
    ids=["scale", "block_table_dtype", "page_size", "q_dtype", "out_shape", "seq_len_range"],
)
def test_validation_errors_raise_value_error_with_cpp_message(override, pattern):
    with pytest.raises(ValueError, match=pattern):
        mlakit.decode(**decode_args(**override))
    with pytest.raises(ValueError, match=pattern):  # select asks the same validate()
        mlakit.select("decode", **decode_args(**override))


def test_conversion_errors():
    with pytest.raises(ValueError, match=r"out: dtype float64 has no MLAKit equivalent"):
        mlakit.decode(**decode_args(out=np.zeros((2, 1, 4, 512))))
    with pytest.raises(TypeError, match=r"out: expected an array"):
        mlakit.decode(**decode_args(out=[[0.0]]))
    with pytest.raises(ValueError, match=r"out: array is read-only"):
        ro = np.zeros((2, 1, 4, 512), BF16)
        ro.flags.writeable = False
        mlakit.decode(**decode_args(out=ro))
    with pytest.raises(ValueError, match=r"rank 5"):
        mlakit.decode(**decode_args(q=np.zeros((2, 1, 1, 4, 576), BF16)))
    with pytest.raises(ValueError, match=r"format is required for a uint8 cache"):
        mlakit.KvCache(np.zeros((2, 4, 656), np.uint8))
    with pytest.raises(ValueError, match=r"format='fp9'"):
        mlakit.KvCache(np.zeros((2, 4, 656), np.uint8), "fp9")
    with pytest.raises(ValueError, match=r"rope_style='gptj'"):
        mlakit.rope(np.zeros((1, 1, 64), np.float32), np.zeros(1, np.int64), np.zeros((1, 64), np.float32),
                    style="gptj")


def test_read_only_inputs_are_accepted():
    args = decode_args()
    for name in ("q", "kv_cache", "block_table", "seq_lens"):
        args[name].flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):  # the cache is written by append_kv: always writable
        mlakit.decode(**args)
    args["kv_cache"] = np.zeros((4, 16, 576), BF16)
    mlakit.decode(**args)


def test_softmax_scale_is_required():
    args = decode_args()
    del args["softmax_scale"]
    with pytest.raises(TypeError):
        mlakit.decode(**args)


def test_named_backend_and_selection():
    s = mlakit.select("decode", **decode_args())
    assert s and s.backend == "reference" and s.reason == ""
    assert "chosen: reference" in s.explain()
    assert {name for name, _ in s.passed_over} == {b.name for b in mlakit.backends()} - {"reference"}
    mlakit.decode(**decode_args(), backend="reference")
    with pytest.raises(ValueError, match=r"backend=nope: must be one of"):
        mlakit.decode(**decode_args(), backend="nope")
    with pytest.raises(ValueError, match=r"op='attention'"):
        mlakit.select("attention")
    cuda = [b for b in mlakit.backends() if b.device == "cuda"]
    if cuda:  # CPU arrays on a CUDA backend: refused with its reason, never rerouted
        with pytest.raises(mlakit.NotSupportedError):
            mlakit.decode(**decode_args(), backend=cuda[0].name)
        s = mlakit.select("decode", **decode_args(), backend=cuda[0].name)
        assert not s and s.backend is None and s.reason


def test_backends_list():
    infos = mlakit.backends()
    assert [b.priority for b in infos] == sorted((b.priority for b in infos), reverse=True)
    ref = next(b for b in infos if b.name == "reference")
    assert ref.device == "cpu" and ref.available and ref.unavailable_reason == ""
    assert {op for op, _ in ref.features} == {"decode", "sparse_decode", "prefill", "merge", "append_kv", "rope",
                                              "gather_kv"}
    assert re.match(r"\d+\.\d+\.\d+", mlakit.__version__)
    assert "cuda=" in mlakit.build_info()


def test_kv_cache_views_bytes_without_copying():
    pages = np.zeros((3, 8, 1, 576), BF16)  # FlashMLA's layout
    c = mlakit.KvCache(pages)
    assert (c.format, c.num_pages, c.page_size, c.row_bytes, c.d_c, c.d_r, c.device) == ("bf16", 3, 8, 1152, 512, 64, "cpu")
    assert c.pages is pages
    assert mlakit.KvCache(np.zeros((3, 8, 576), FP8)).format == "fp8_e4m3"
    assert mlakit.KvCache(np.zeros((3, 8, 576), np.float16)).format == "fp16"
    ds = mlakit.KvCache(np.zeros((3, 8, 656), np.uint8), "fp8_ds_mla")
    assert ds.row_bytes == 656
    assert "fp8_ds_mla" in repr(ds)
    # A strided page view (every other page) is accepted as is: strides are passed through.
    big = np.zeros((6, 8, 576), BF16)
    assert mlakit.KvCache(big[::2]).num_pages == 3


def test_deepseek_v4_cache_view_and_its_rules():
    """fp8_ds_v4 (docs/spec.md section 4): FlashMLA's [num_blocks, P, 1, 584] view over padded pages, V4's dims."""
    page_size, num_pages = 4, 3
    page_bytes = -(-page_size * 584 // 576) * 576  # FlashMLA pads pages to a multiple of 576 bytes
    raw = np.zeros((num_pages, page_bytes), np.uint8)
    view = np.lib.stride_tricks.as_strided(raw, (num_pages, page_size, 1, 584), (page_bytes, 584, 584, 1))
    c = mlakit.KvCache(view, "fp8_ds_v4", d_c=448, d_r=64, v_whole_row=True)
    assert (c.format, c.num_pages, c.page_size, c.row_bytes, c.d_c, c.d_r, c.v_whole_row) == (
        "fp8_ds_v4", num_pages, page_size, 584, 448, 64, True)
    assert "v_whole_row=True" in repr(c)
    q = np.zeros((1, 1, 2, 512), BF16)
    out = np.full((1, 1, 2, 512), np.nan, BF16)
    lse = np.full((1, 1, 2), np.nan, np.float32)
    idx = np.array([[[0, 5, -1]]], np.int32)
    mlakit.sparse_decode(q, c, idx, out, lse, softmax_scale=0.044)  # zero cache: every key has the same score
    assert np.all(out.astype(np.float32) == 0) and np.allclose(lse, np.log(2.0))
    with pytest.raises(ValueError, match=r"kv.format=fp8_ds_v4: needs d_c=448 and d_r=64"):
        mlakit.sparse_decode(np.zeros((1, 1, 2, 576), BF16), mlakit.KvCache(view, "fp8_ds_v4"), idx, out, lse,
                             softmax_scale=0.044)
    other_stride = np.lib.stride_tricks.as_strided(raw, (num_pages, page_size, 1, 584), (page_bytes, 576, 584, 1))
    with pytest.raises(ValueError, match=r"stride\[1\]=576: must be 584 for fp8_ds_v4"):
        mlakit.sparse_decode(q, mlakit.KvCache(other_stride, "fp8_ds_v4", d_c=448, d_r=64, v_whole_row=True), idx,
                             out, lse, softmax_scale=0.044)
    with pytest.raises(ValueError, match=r"extra_kv.pages=given: needs extra_indices"):
        mlakit.sparse_decode(q, c, idx, out, lse, softmax_scale=0.044, extra_kv_cache=c)
    # A bare extra array takes the main cache's format and geometry; messages name it.
    extra_idx = np.array([[[1, -1]]], np.int32)
    mlakit.sparse_decode(q, c, idx, out, lse, softmax_scale=0.044, extra_kv_cache=view, extra_indices=extra_idx)
    assert np.allclose(lse, np.log(3.0))  # three valid keys over both caches, all with the same score
    with pytest.raises(ValueError, match=r"extra_indices\[0\]\[0\]\[0\]=12: must be < num_pages \* page_size=12"):
        mlakit.sparse_decode(q, c, idx, out, lse, softmax_scale=0.044, extra_kv_cache=view,
                             extra_indices=np.array([[[12, 0]]], np.int32))
    e4m3 = mlakit.KvCache(np.zeros((2, 4, 512), FP8), d_c=448, d_r=64, v_whole_row=True,
                          kv_scale=np.ones(1, np.float32))
    with pytest.raises(ValueError, match=r"extra_kv_cache: .*pass mlakit.KvCache"):
        mlakit.sparse_decode(q, e4m3, idx[:, :, :1], out, lse, softmax_scale=0.044,
                             extra_kv_cache=np.zeros((2, 4, 512), FP8), extra_indices=extra_idx)


def test_kv_scale_pointer_is_read_at_run_time(rng):
    """fp8_e4m3 cache: a float32 scale array is read when the op runs, not when the view is made."""
    page_size, d_c, d_r = 4, 32, 8
    cache = np.zeros((1, page_size, d_c + d_r), np.uint8)
    scale = np.array([1.0], np.float32)
    kv = mlakit.KvCache(cache, "fp8_e4m3", d_c=d_c, d_r=d_r, kv_scale=scale)
    kv_c = np.full((1, d_c), 2.0, np.float32)
    k_pe = np.full((1, d_r), 2.0, np.float32)
    scale[0] = 2.0  # x / kv_scale = 1.0 -> e4m3 0x38
    mlakit.append_kv(kv_c, k_pe, np.zeros(1, np.int64), kv)
    assert (cache[0, 0].view(FP8).astype(np.float32) == 1.0).all()


def test_workspace_callable_is_not_asked_when_no_bytes_are_needed():
    # The CPU reference needs no workspace: an allocator passed as workspace= is never called, and the result is
    # the one without it. (The CUDA case, where it is asked for the backend's bytes: tests/python/test_torch.py.)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 1, 4, 576)).astype(np.float32).astype(BF16)
    cache = rng.standard_normal((3, 16, 576)).astype(np.float32).astype(BF16)
    table = np.array([[0, 1], [2, 0]], np.int32)
    lens = np.array([20, 5], np.int32)
    outs = []
    for workspace in (None, lambda n: pytest.fail(f"asked for {n} bytes")):
        out = np.full((2, 1, 4, 512), np.nan, np.float32).astype(BF16)  # poisoned: every element must be written
        lse = np.full((2, 1, 4), np.nan, np.float32)
        mlakit.decode(q, cache, table, lens, out, lse, softmax_scale=0.1, workspace=workspace)
        outs.append((out.astype(np.float32), lse))
    assert mlakit.decode_workspace_bytes(q, cache, table, lens, out, lse, softmax_scale=0.1) == 0
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])


def test_stubs_match_the_module():
    stub = (REPO_ROOT / "python" / "mlakit" / "_native.pyi").read_text()
    tree = ast.parse(stub)
    stubbed = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    public = {n for n in dir(_native) if not n.startswith("_")}
    assert stubbed == public, f"missing from stub: {public - stubbed}; stale in stub: {stubbed - public}"
    assert set(mlakit.__all__) <= {n for n in dir(mlakit)}


def test_docs_example_runs_as_written(capsys):
    text = (REPO_ROOT / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "docs/python.md has no python example"
    exec(compile(blocks[0], "docs/python.md", "exec"), {"__name__": "docs_example"})
    printed = capsys.readouterr().out
    assert "decode runs on reference" in printed and "layer 1:" in printed
    assert "nan" not in printed.lower()
