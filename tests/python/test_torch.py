"""torch tensors through the native API and the mlakit.torch custom ops. Skipped when torch is not
installed (CI does not install it); the CUDA tests run on a machine with a GPU and a CUDA backend."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import REPO_ROOT, BF16, assert_close, assert_lse_close, bf16_tolerance, flashmla_cases, load_case, require_testdata

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests run on the GPU machine)")

import mlakit  # noqa: E402
import mlakit.torch as mt  # noqa: E402
import reference as ref  # noqa: E402
from mlakit.compat.flashmla import flash_mla_with_kvcache, get_mla_metadata  # noqa: E402

TAU = 0.13523378
D_C, D_R, P = 512, 64, 64
HAS_CUDA = torch.cuda.is_available()


def decode_inputs(device, lengths=(70, 1, 130), s_q=1, h_q=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    pages_per = [-(-n // P) for n in lengths]
    num_pages = sum(pages_per) + 1
    cache = torch.rand((num_pages, P, D_C + D_R), generator=g).mul_(2).sub_(1).to(torch.bfloat16)
    order = torch.randperm(num_pages, generator=g)
    block_table = torch.full((len(lengths), max(pages_per) + 1), -1, dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages_per):
        block_table[b, :n] = order[used : used + n]
        used += n
    q = torch.rand((len(lengths), s_q, h_q, D_C + D_R), generator=g).mul_(2).sub_(1).to(torch.bfloat16)
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    return [t.to(device) for t in (q, cache, block_table, seq_lens)]


def numpy_ref(q, cache, block_table, seq_lens, causal=False):
    as_np = lambda t: t.cpu().view(torch.int16).numpy().view(BF16) if t.dtype == torch.bfloat16 else t.cpu().numpy()
    return ref.decode(as_np(q), as_np(cache), as_np(block_table), as_np(seq_lens), TAU, causal, D_C)


def check_decode(out, lse, inputs, causal=False):
    want_out, want_lse = numpy_ref(*inputs, causal=causal)
    assert_close(out.float().cpu().numpy(), want_out, bf16_tolerance(want_out, 1.0), "out")
    assert_lse_close(lse.cpu().numpy(), want_lse)


def test_native_decode_with_cpu_torch_tensors():
    q, cache, block_table, seq_lens = inputs = decode_inputs("cpu")
    out = torch.full((q.shape[0], 1, q.shape[2], D_C), float("nan"), dtype=torch.bfloat16)
    lse = torch.full(q.shape[:3], float("nan"))
    mlakit.decode(q, cache, block_table, seq_lens, out, lse, softmax_scale=TAU)
    check_decode(out, lse, inputs)


def test_requires_grad_is_refused_with_reason():
    q, cache, block_table, seq_lens = decode_inputs("cpu")
    out = torch.empty((q.shape[0], 1, q.shape[2], D_C), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="requires grad"):
        mlakit.decode(q.float().requires_grad_().bfloat16(), cache, block_table, seq_lens, out, softmax_scale=TAU)


needs_cpp_ops = pytest.mark.skipif(not mt.CPP_OPS, reason="mlakit/_torch_ops.so not in this package (built without torch)")
CPP_OP_NAMES = ("decode", "sparse_decode", "append_kv", "append_kv_rope_q")


@needs_cpp_ops
def test_cpp_operators_have_the_python_definitions_schemas():
    # The Python definitions are the fallback where _torch_ops.so is absent: callers must not see a difference.
    for name in CPP_OP_NAMES:
        want = torch._C.parse_schema(f"mlakit::{mt._SCHEMAS[name]}")
        assert getattr(torch.ops.mlakit, name).default._schema == want, name


@needs_cpp_ops
def test_cpp_and_python_kernels_agree_bit_for_bit_on_cpu():
    inputs = decode_inputs("cpu", s_q=2)
    got = torch.ops.mlakit.decode(*inputs, TAU, True)
    want = mt._KERNELS["decode"](*inputs, TAU, True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    q, cache = inputs[0], inputs[1]
    ids = torch.randint(-1, cache.shape[0] * P, (q.shape[0], q.shape[1], 40), dtype=torch.int32)
    sink = torch.linspace(-1, 1, q.shape[2])
    got = torch.ops.mlakit.sparse_decode(q, cache, ids, TAU, attn_sink=sink)
    want = mt._KERNELS["sparse_decode"](q, cache, ids, TAU, attn_sink=sink)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    kv_c, k_pe = torch.rand(5, D_C).bfloat16(), torch.rand(5, D_R).bfloat16()
    slots = torch.tensor([3, -1, 70, 64, 9])
    a, b = cache.clone(), cache.clone()
    torch.ops.mlakit.append_kv(kv_c, k_pe, slots, a)
    mt._KERNELS["append_kv"](kv_c, k_pe, slots, b)
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@needs_cpp_ops
def test_cpp_operators_raise_the_python_exceptions():
    q, cache, block_table, seq_lens = decode_inputs("cpu")
    with pytest.raises(ValueError, match="seq_lens"):  # the C++ validation's message, as a ValueError
        torch.ops.mlakit.decode(q, cache, block_table, seq_lens.long(), TAU)
    with pytest.raises(ValueError, match="requires grad"):
        torch.ops.mlakit.decode(q.float().requires_grad_().bfloat16(), cache, block_table, seq_lens, TAU)
    with pytest.raises(ValueError, match="kv_format='fp9'"):
        torch.ops.mlakit.decode(q, cache, block_table, seq_lens, TAU, kv_format="fp9")
    with pytest.raises(ValueError, match="needs both"):
        torch.ops.mlakit.sparse_decode(q, cache, torch.zeros(3, 1, 4, dtype=torch.int32), TAU, extra_kv_cache=cache)
    with pytest.raises(ValueError, match="extra_topk_length=given: needs extra_indices"):  # not dropped in silence
        torch.ops.mlakit.sparse_decode(q, cache, torch.zeros(3, 1, 4, dtype=torch.int32), TAU,
                                       extra_topk_length=torch.zeros(3, dtype=torch.int32))


def test_custom_ops_on_cpu_and_under_torch_compile():
    inputs = decode_inputs("cpu")
    out, lse = torch.ops.mlakit.decode(*inputs, TAU)
    check_decode(out, lse, inputs)

    def step(q, cache, block_table, seq_lens):
        out, lse = mt.decode(q, cache, block_table, seq_lens, TAU)
        return out.float() * 2, lse

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    c_out, c_lse = compiled(*inputs)
    torch.testing.assert_close(c_out, out.float() * 2, rtol=0, atol=0)
    torch.testing.assert_close(c_lse, lse, rtol=0, atol=0)


def test_custom_op_fake_impls_pass_opcheck():
    inputs = decode_inputs("cpu", lengths=(3, 9))
    torch.library.opcheck(torch.ops.mlakit.decode.default, (*inputs, TAU))
    x = torch.rand(4, 2, D_R)
    cos_sin = torch.from_numpy(mlakit.yarn_cos_sin_table(16))
    torch.library.opcheck(torch.ops.mlakit.rope.default, (x, torch.arange(4), cos_sin))


def test_append_kv_and_rope_ops_in_place():
    t = 5
    kv_c = torch.rand(t, D_C).bfloat16()
    k_pe = torch.rand(t, D_R).bfloat16()
    cache = torch.full((2, 4, D_C + D_R), float("nan"), dtype=torch.bfloat16)
    slots = torch.tensor([0, 1, -1, 6, 7])
    cos_sin = torch.from_numpy(mlakit.yarn_cos_sin_table(32))
    positions = torch.tensor([0, 1, 2, 3, 4])
    mt.append_kv(kv_c, k_pe, slots, cache, positions=positions, cos_sin=cos_sin)
    flat = cache.view(-1, D_C + D_R)
    torch.testing.assert_close(flat[[0, 1, 6, 7], :D_C], kv_c[[0, 1, 3, 4]], rtol=0, atol=0)
    x = k_pe.float()[:, None, :].clone()
    mt.rope(x, positions, cos_sin)
    torch.testing.assert_close(flat[[0, 1, 6, 7], D_C:].float(), x[[0, 1, 3, 4], 0], rtol=2**-7, atol=2**-8)
    # With q (op mlakit::append_kv_rope_q): the same cache bytes, and q's RoPE columns rotated in place.
    q = torch.rand(t, 2, D_C + D_R).bfloat16()
    q0 = q.clone()
    cache_q = torch.full_like(cache, float("nan"))
    mt.append_kv(kv_c, k_pe, slots, cache_q, positions=positions, cos_sin=cos_sin, q=q)
    torch.testing.assert_close(cache_q, cache, rtol=0, atol=0, equal_nan=True)
    want = q0[..., D_C:].float().contiguous()
    mt.rope(want, positions, cos_sin)
    torch.testing.assert_close(q[..., D_C:].float(), want, rtol=2**-7, atol=2**-8)
    torch.testing.assert_close(q[..., :D_C], q0[..., :D_C], rtol=0, atol=0)


needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")


def cuda_decode_backend(inputs):
    q, cache, block_table, seq_lens = inputs
    out = torch.empty((q.shape[0], q.shape[1], q.shape[2], D_C), dtype=q.dtype, device=q.device)
    s = mlakit.select("decode", q, cache, block_table, seq_lens, out, softmax_scale=TAU)
    if not s:
        pytest.skip("no CUDA backend serves decode in this build: " + "; ".join(f"{b}: {r}" for b, r in s.passed_over))
    return s.backend


@needs_cuda
@pytest.mark.parametrize("causal,s_q", [(False, 1), (True, 2)])
def test_cuda_decode_matches_spec(causal, s_q):
    inputs = decode_inputs("cuda", s_q=s_q)
    cuda_decode_backend(inputs)
    out, lse = mt.decode(*inputs, TAU, causal)
    torch.cuda.synchronize()
    check_decode(out, lse, inputs, causal)


@needs_cuda
def test_cuda_graph_capture_replays_with_new_lengths():
    inputs = decode_inputs("cuda", lengths=(70, 1, 130))
    cuda_decode_backend(inputs)
    q, cache, block_table, seq_lens = inputs
    nbytes = mt.decode_workspace_bytes(q, cache, block_table, seq_lens, TAU)
    workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device="cuda")

    def step():
        mt.decode_plan(workspace, q, cache, block_table, seq_lens, TAU)
        return mt.decode_run(workspace, q, cache, block_table, seq_lens, TAU)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = step()
    # New lengths must stay within the pages each request owns (2, 1 and 3 pages of 64).
    for lengths in ([70, 1, 130], [5, 64, 129], [0, 64, 2], [128, 1, 192]):
        seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        check_decode(out, lse, inputs)


@needs_cuda
def test_cuda_workspace_from_a_callable_gets_the_bytes_the_backend_needs():
    # The one-shot call asks the allocator once, with the chosen backend's byte count, and computes what a
    # preallocated workspace gives; an allocator that returns too little is refused by name, before any launch.
    q, cache, block_table, seq_lens = inputs = decode_inputs("cuda", lengths=(70, 0, 1000))
    cuda_decode_backend(inputs)
    out = torch.full((q.shape[0], 1, q.shape[2], D_C), float("nan"), dtype=q.dtype, device="cuda")
    lse = torch.full(q.shape[:3], float("nan"), device="cuda")
    need = mlakit.decode_workspace_bytes(q, cache, block_table, seq_lens, out, lse, softmax_scale=TAU)
    asked = []

    def alloc(nbytes):
        asked.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8, device="cuda")

    mlakit.decode(q, cache, block_table, seq_lens, out, lse, softmax_scale=TAU, workspace=alloc)
    torch.cuda.synchronize()
    assert asked == [need] and need > 0
    check_decode(out, lse, inputs)
    with pytest.raises(ValueError, match="workspace: .*at least"):
        mlakit.decode(q, cache, block_table, seq_lens, out, lse, softmax_scale=TAU,
                      workspace=lambda n: torch.empty(n - 1, dtype=torch.uint8, device="cuda"))


def prefill_inputs(lens, h_q=3, d_qk=192, d_v=128, seed=0):
    """Ragged prefill inputs on the GPU: bf16 q, k, v [T, h, d] and int32 cu_seqlens from (Lq, Lk) pairs."""
    g = torch.Generator().manual_seed(seed)
    cu_q = torch.tensor([0] + list(np.cumsum([lq for lq, _ in lens])), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(np.cumsum([lk for _, lk in lens])), dtype=torch.int32)
    rand = lambda t, d: (torch.rand((t, h_q, d), generator=g) * 2 - 1).to(torch.bfloat16)
    q, k, v = rand(int(cu_q[-1]), d_qk), rand(int(cu_k[-1]), d_qk), rand(int(cu_k[-1]), d_v)
    return [x.cuda() for x in (q, k, v, cu_q, cu_k)]


def check_prefill(out, lse, inputs, causal):
    as_np = lambda t: t.cpu().view(torch.int16).numpy().view(BF16) if t.dtype == torch.bfloat16 else t.cpu().numpy()
    want_out, want_lse = ref.prefill(*(as_np(t) for t in inputs), TAU, causal)
    assert_close(as_np(out), want_out, bf16_tolerance(want_out, 1.0), "prefill out")
    assert_lse_close(lse.cpu().numpy(), want_lse)


@needs_cuda
@pytest.mark.parametrize("backend", ["cuda", "cuda_sm90"])
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_prefill_matches_spec(backend, causal):
    inputs = prefill_inputs([(0, 0), (1, 1), (70, 200), (65, 65), (3, 130)])
    q, k, v, cu_q, cu_k = inputs
    out = torch.empty((q.shape[0], q.shape[1], v.shape[2]), dtype=q.dtype, device="cuda")
    lse = torch.empty((q.shape[0], q.shape[1]), dtype=torch.float32, device="cuda")
    s = mlakit.select("prefill", q, k, v, cu_q, cu_k, out, lse, softmax_scale=TAU, causal=causal, backend=backend)
    if not s:
        pytest.skip(f"{backend} does not serve this prefill here: " + "; ".join(f"{b}: {r}" for b, r in s.passed_over))
    mlakit.prefill(q, k, v, cu_q, cu_k, out, lse, softmax_scale=TAU, causal=causal, backend=backend)
    torch.cuda.synchronize()
    check_prefill(out, lse, inputs, causal)


def few_requests(seed):
    """Two requests, 64 queries over 124 keys in all, split three ways (seeds 1 - 2, 3, 4)."""
    return {3: [(1, 1), (63, 123)], 4: [(0, 0), (64, 124)]}.get(seed, [(40, 100), (24, 24)])


def short_requests(seed, n=40):
    """n requests of 0 - 63 new tokens over up to 29 more keys each: a permutation of fixed lengths, so every seed
    gives the same totals (every replay the same tensor shapes)."""
    rng = np.random.default_rng(seed)
    lq = rng.permutation(np.arange(n) * 64 // n)
    extra = rng.permutation(np.arange(n) * 30 // n)
    return [(int(a), int(a + b)) for a, b in zip(lq, extra)]


# Two requests at 3 heads take one CTA per block; 40 short requests at 8 heads (about 400 items) the persistent launch,
# on any GPU of fewer SMs than that (docs/design.md, "Short requests: a persistent grid").
@needs_cuda
@pytest.mark.parametrize("h_q,lens_of", [(3, few_requests), (8, short_requests)], ids=["few", "persistent"])
def test_cuda_graph_capture_of_the_prefill_op_replays_with_new_lengths(h_q, lens_of):
    """The torch op captured once for fixed tensor shapes, replayed after new contents of q, k, v and cu_seqlens."""
    inputs = prefill_inputs(lens_of(1), h_q=h_q, seed=1)
    q, k, v, cu_q, cu_k = inputs
    out_probe = torch.empty((q.shape[0], h_q, 128), dtype=q.dtype, device="cuda")
    s = mlakit.select("prefill", q, k, v, cu_q, cu_k, out_probe, softmax_scale=TAU, causal=True)
    if not s:
        pytest.skip("no CUDA backend serves prefill in this build")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.ops.mlakit.prefill(q, k, v, cu_q, cu_k, TAU, True)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = torch.ops.mlakit.prefill(q, k, v, cu_q, cu_k, TAU, True)
    for seed in (2, 3, 4):
        for dst, src in zip(inputs, prefill_inputs(lens_of(seed), h_q=h_q, seed=seed)):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        check_prefill(out, lse, inputs, True)


@needs_cuda
@pytest.mark.parametrize("case,folder", flashmla_cases() or [pytest.param(None, None, id="no-testdata")])
def test_compat_with_cuda_tensors(case, folder):
    require_testdata()
    d = {k: torch.from_numpy(v.view(np.int16) if v.dtype == BF16 else v).cuda() for k, v in load_case(folder).items()}
    for k in ("q", "kv_cache", "kv_bf16", "out"):
        if k in d:
            d[k] = d[k].view(torch.bfloat16)
    dense = case["op"] == "dense_decode"
    probe_out = torch.empty((*d["q"].shape[:3], D_C), dtype=torch.bfloat16, device="cuda")
    if dense:
        s = mlakit.select("decode", d["q"], d["kv_cache"], d["block_table"], d["seq_lens"], probe_out, softmax_scale=TAU)
    else:
        s = mlakit.select("sparse_decode", d["q"], mlakit.KvCache(d["kv_cache"], "fp8_ds_mla"), d["indices"], probe_out,
                          softmax_scale=TAU)
    if not s:
        pytest.skip(f"no CUDA backend serves {case['op']}: {s.passed_over}")
    meta, splits = get_mla_metadata(d.get("seq_lens"), case["s_q"] * case["h_q"], 1)
    if dense:
        out, lse = flash_mla_with_kvcache(d["q"], d["kv_cache"], d["block_table"], d["seq_lens"], D_C, meta, splits,
                                          softmax_scale=case["softmax_scale"], causal=case["causal"])
    else:
        out, lse = flash_mla_with_kvcache(d["q"], d["kv_cache"], None, None, D_C, meta, splits,
                                          softmax_scale=case["softmax_scale"], is_fp8_kvcache=True, indices=d["indices"])
    want = d["out"].float().cpu().numpy()
    assert_close(out.float().cpu().numpy(), want, bf16_tolerance(want, 1.0), f"{case['name']} out")
    assert_lse_close(lse.cpu().numpy(), d["lse"].cpu().numpy())


@needs_cuda
def test_docs_torch_example_runs_as_written(capsys):
    blocks = re.findall(r"```python\n(.*?)```", (REPO_ROOT / "docs" / "python.md").read_text(), flags=re.S)
    assert len(blocks) >= 2, "docs/python.md has no torch example"
    exec(compile(blocks[1], "docs/python.md (torch)", "exec"), {"__name__": "docs_example"})
    printed = capsys.readouterr().out
    assert "decode runs on cuda" in printed, printed


@needs_cuda
def test_torch_compile_fullgraph_appends_and_decodes_on_cuda():
    """Issue 11 item 5: a step that writes each request's newest token into the cache (fused RoPE) and then decodes,
    compiled whole by torch.compile (default inductor backend, fullgraph=True), equals the eager step bit for bit:
    the same custom ops run on the same inputs, in the same order (the cache write before the decode that reads it)."""
    q, cache, block_table, seq_lens = decode_inputs("cuda", lengths=(70, 1, 130))
    b = q.shape[0]
    g = torch.Generator().manual_seed(7)
    kv_c = torch.rand((b, D_C), generator=g).mul(2).sub(1).bfloat16().cuda()
    k_pe = torch.rand((b, D_R), generator=g).mul(2).sub(1).bfloat16().cuda()
    positions = (seq_lens - 1).long()
    pages = block_table.gather(1, (positions // P).view(-1, 1).int()).view(-1).long()
    slots = pages * P + positions % P  # the newest token of each request: the decode must see it
    cos_sin = torch.from_numpy(mlakit.yarn_cos_sin_table(256)).cuda()

    def step(kv_c, k_pe, slots, positions, cache, q, block_table, seq_lens):
        mt.append_kv(kv_c, k_pe, slots, cache, positions=positions, cos_sin=cos_sin)
        out, lse = mt.decode(q, cache, block_table, seq_lens, TAU)
        return out.float() * 2, lse

    eager_cache = cache.clone()
    eager_out, eager_lse = step(kv_c, k_pe, slots, positions, eager_cache, q, block_table, seq_lens)
    compiled = torch.compile(step, fullgraph=True)
    c_out, c_lse = compiled(kv_c, k_pe, slots, positions, cache, q, block_table, seq_lens)
    torch.cuda.synchronize()
    torch.testing.assert_close(cache, eager_cache, rtol=0, atol=0)
    torch.testing.assert_close(c_out, eager_out, rtol=0, atol=0)
    torch.testing.assert_close(c_lse, eager_lse, rtol=0, atol=0)
    assert not torch.equal(cache, decode_inputs("cuda", lengths=(70, 1, 130))[1])  # the step did write the cache
    check_decode(c_out.div(2).bfloat16(), c_lse, (q, cache, block_table, seq_lens))  # and decoded what it wrote
