# Emulates one 32-token tile of the few-row kernels' index maps (src/cuda/decode/sm80/few_rows.cuh) with the PTX
# m16n8k16 / m16n8k8 fragment layouts and ldmatrix.x4.trans, and compares S and O against plain matrix products, for
# both formats:
#   dsv4:  decode_few_rows_dsv4 (512 columns: 7 e4m3 slices with UE8M0 scales, warp 7 the RoPE slice, V = whole row);
#   dsmla: decode_few_rows_dsmla (576 columns: 8 e4m3 slices with fp32 scales of 128 columns, the RoPE part as one
#          m16n8k8 step per warp, V = the first 512 columns).
# It checks Q's and K's d-permutation, the scales (dsmla: on the partial S and on P; dsv4, since
# 0289ac5: on K's bf16 words in (a), one bf16x2 multiply per word by the scale table's word of
# token 8 n + gid, the V slice stored from the same words, S unscaled and P packed to bf16 in (c) and read by
# ldmatrix.x4 in (e); the scaled words against the reference's fp32 dequantised values e4m3 x 2^(e - 127), bit for bit,
# and deliberate mistakes, which must fail), the S-partial / P layouts and the V addresses with float64 values (indices,
# not rounding; but dsv4's K words and bf16 P with their rounding); for dsmla also the gather's scatter of a 656-byte
# row into the stage's e4m3 / RoPE areas and the small slot's [group][token] scales, byte for byte, and the
# shared-memory bank pattern of the new reads (K LDS.128, RoPE LDS.32, scale LDS.64); for dsv4 the gather warp's copy
# map (32 rows by one warp, 4 lanes per row, row addresses by shuffle; invalid rows zero-filled) byte for byte, and the
# scale table (sc_tab: bf16x2 words, warps 0-6 only) and the reads of both; UE8M0 x e4m3 in bf16 for all 256 x 254 pairs
# against the fp32 route (as tests/gpu/test_dequant.cu) and exact for normal results; for the fp8_e4m3 kernel
# (4f79735) its gather and RoPE reads byte for byte; for fp8_e4m3's packed P
# (0289ac5; the kernel packs fp16 there, the same layout, emulated here in bf16) the P store of (c) and the
# ldmatrix.x4 A fragments of (e), byte for byte, bit-equal to the fp32 path's and through P V (and that a swapped
# ldmatrix address map fails). Usage: python3 docs/experiments/smxx-sparse-few-rows-fragsim.py (numpy).
import numpy as np

H = 16; T = 32


def mma(a, b, c, k=16):  # a[lane][4 or 2][2], b[lane][2 or 1][2], c[lane][4] -> d[lane][4]
    A = np.zeros((16, k)); B = np.zeros((k, 8)); C = np.zeros((16, 8))
    for l in range(32):
        gid, tig = l // 4, l % 4
        for e in range(2):
            A[gid][2*tig+e] = a[l][0][e]; A[gid+8][2*tig+e] = a[l][1][e]
            B[2*tig+e][gid] = b[l][0][e]
            if k == 16:
                A[gid][2*tig+8+e] = a[l][2][e]; A[gid+8][2*tig+8+e] = a[l][3][e]
                B[2*tig+8+e][gid] = b[l][1][e]
            C[gid][2*tig+e] = c[l][e]; C[gid+8][2*tig+e] = c[l][2+e]
    Dm = A @ B + C
    return [[Dm[l//4][2*(l%4)], Dm[l//4][2*(l%4)+1], Dm[l//4+8][2*(l%4)], Dm[l//4+8][2*(l%4)+1]] for l in range(32)]


def ldmatrix_trans(rowaddr):  # rowaddr[lane] -> 8 values; returns r[lane][4][2]
    out = [[None]*4 for _ in range(32)]
    for j in range(4):
        M = np.array([rowaddr[8*j + i] for i in range(8)])  # stored 8x8 matrix j: row i from lane 8j+i
        for t in range(32):
            out[t][j] = [M[2*(t%4)][t//4], M[2*(t%4)+1][t//4]]
    return out



def pv_step(a, V, kk, o):
    """One k-step kk of P V for a warp's 64 columns: V's B fragments by ldmatrix.x4.trans over tokens 16 kk .. 16 kk
    + 15 (lane l: token 16 kk + l % 8 + 8 ((l / 8) % 2), columns 8 (l / 16) + 16 np), two m16n8k16 per n-pair np;
    a[lane] are P's A fragment values; o[n] is updated in place."""
    for np_ in range(4):
        rows = []
        for l in range(32):
            tok = 16*kk + l % 8 + ((l // 8) % 2) * 8
            c0 = (l // 16) * 8 + np_ * 16
            rows.append(V[tok, c0:c0+8])
        b = ldmatrix_trans(rows)
        o[2*np_] = mma(a, [[b[l][0], b[l][1]] for l in range(32)], o[2*np_])
        o[2*np_+1] = mma(a, [[b[l][2], b[l][3]] for l in range(32)], o[2*np_+1])

def conflict_free(addrs, width):
    """addrs[lane] byte addresses of one warp-wide shared access of `width` bytes per lane: no bank conflict?"""
    per_phase = 128 // width  # lanes served per 128-byte phase (4 B: 32, 8 B: 16, 16 B: 8)
    for p in range(0, 32, per_phase):
        banks = {}
        for l in range(p, p + per_phase):
            for w in range(width // 4):
                word = addrs[l] // 4 + w
                b = word % 32
                if banks.setdefault(b, word) != word:
                    return False
    return True


def run(fmt, rng, mutate=None):
    """mutate (dsv4 only, each must fail): "tok_2tig" K's scale of token 8 n + 2 tig (the C column's) instead of
    8 n + gid; "group" the scale of group g + 1; "v_unscaled" the V slice from the unscaled words; "p_scaled" P still
    times the scales (kTokenScales left on); "warp7_table" the RoPE warp reads (and multiplies by) its table row."""
    mla = fmt == "dsmla"
    D = 576 if mla else 512
    n_fp8 = 8 if mla else 7                 # e4m3 slices
    Q = rng.standard_normal((H, D))
    Kraw = rng.standard_normal((T, D))      # "unscaled" values (e4m3 codes, bf16 RoPE)
    if mla:
        scale = rng.uniform(0.3, 3.0, size=(T, 4))             # any fp32 per token and 128-column group
        sc_of = lambda tok, g: scale[tok, g // 2] if g < 8 else 1.0  # slice g -> group g // 2
    else:
        # e4m3 values (every finite code) and bf16 RoPE values; UE8M0 exponents per token and group g = dims
        # [64 g, 64 g + 64) over a range wide enough that a wrong token or group shows
        codes = rng.integers(0, 256, size=(T, 448))
        codes[(codes & 0x7F) == 0x7F] = 0  # no NaN codes
        Kraw[:, :448] = e4m3_value(codes)
        Kraw[:, 448:] = round_bf16(Kraw[:, 448:])
        ue8m0 = rng.integers(127 - 20, 127 + 21, size=(T, 7))
        scale = np.ldexp(1.0, ue8m0 - 127)
        sc_of = lambda tok, g: scale[tok, g] if g < 7 else 1.0
        # sc_tab: lane l of warp g < 7 writes token l's scale of group g as a bf16x2 word (both halves the bf16 of
        # ue8m0_to_float); warp 7's row is never written (NaN: a read of it fails)
        sc_tab = np.full((8, 32), np.nan)
        for g in range(7):
            for l in range(32):
                sc_tab[g][l] = round_bf16(np.float32(scale[l, g]))
    Kfull = Kraw.copy()
    for g in range(n_fp8):
        for tok in range(T):
            Kfull[tok, 64*g:64*g+64] *= sc_of(tok, g)   # the reference: e4m3 x 2^(e - 127) in fp32 (exact)

    # ---- per warp g: Q K^T over slice g (+ dsmla: RoPE columns 512 + [8 g, 8 g + 8) as one m16n8k8 step) ----
    spart = np.zeros((8, H, T))
    vslice = np.zeros((8, T, 64))
    for g in range(8):
        qa = {}
        for l in range(32):
            gid, tig = l // 4, l % 4
            lo = Q[gid, 64*g+16*tig: 64*g+16*tig+16]; hi = Q[gid+8, 64*g+16*tig: 64*g+16*tig+16]
            wl = [lo[2*i:2*i+2] for i in range(8)]; wh = [hi[2*i:2*i+2] for i in range(8)]
            qa[l] = [[wl[2*s], wh[2*s], wl[2*s+1], wh[2*s+1]] for s in range(4)]
        acc = [[[0.0]*4 for _ in range(32)] for n in range(4)]
        for n in range(4):
            kb = {}
            for l in range(32):
                gid, tig = l // 4, l % 4
                tok = 8*n + gid
                vals = Kraw[tok, 64*g+16*tig: 64*g+16*tig+16]   # the 16 bytes (fp8) or 32 bytes (RoPE), natural order
                raw = vals
                if not mla and (g < 7 or mutate == "warp7_table"):
                    # dsv4 (a): the 8 bf16x2 words times the scale word of token tok, group g (sc_tab[g][tok],
                    # written by lane tok of this warp before the __syncwarp), one bf16x2 multiply each
                    tok_s = 8*n + 2*tig if mutate == "tok_2tig" else tok
                    g_s = (g + 1) % 7 if mutate == "group" else g
                    s2 = sc_tab[g_s][tok_s]
                    assert not np.isnan(s2), "sc_tab row read before (or without) being written"
                    vals = round_bf16(vals * s2)  # __hmul2: the exact product rounded once to bf16
                    if mutate is None:  # exact: the reference's fp32 dequantised values, bit for bit
                        assert (vals == Kfull[tok, 64*g+16*tig: 64*g+16*tig+16]).all(), "scaled K word inexact"
                kb[l] = [vals[2*i:2*i+2] for i in range(8)]
                vslice[g, tok, 16*tig:16*tig+16] = raw if mutate == "v_unscaled" else vals  # STS.128 x2, row tok
            for s in range(4):
                acc[n] = mma([qa[l][s] for l in range(32)], [[kb[l][2*s], kb[l][2*s+1]] for l in range(32)], acc[n])
        if mla:
            # latent partial times the token scales (C columns 8 n + 2 tig + j), then the RoPE step onto it
            for n in range(4):
                for l in range(32):
                    tig = l % 4
                    for j in range(2):
                        s_ = sc_of(8*n + 2*tig + j, g)
                        acc[n][l][j] *= s_; acc[n][l][2+j] *= s_
            qr = {}
            for l in range(32):
                gid, tig = l // 4, l % 4
                c = 512 + 8*g + 2*tig
                qr[l] = [Q[gid, c:c+2], Q[gid+8, c:c+2]]
            for n in range(4):
                kr = {}
                for l in range(32):
                    gid, tig = l // 4, l % 4
                    c = 512 + 8*g + 2*tig
                    kr[l] = [Kraw[8*n + gid, c:c+2]]
                acc[n] = mma([qr[l] for l in range(32)], [kr[l] for l in range(32)], acc[n], k=8)
        for l in range(32):
            gid, tig = l // 4, l % 4
            for n in range(4):
                for j in range(2):
                    tokc = 8*n + 2*tig + j
                    s_ = 1.0   # dsmla: scaled before the RoPE step; dsv4: K carries the scale
                    spart[g, gid, tokc] = acc[n][l][j] * s_
                    spart[g, gid+8, tokc] = acc[n][l][2+j] * s_
    S = spart.sum(0)
    assert np.allclose(S, Q @ Kfull.T), fmt + ": S mismatch"
    # ---- (c) per warp: rows 2g, 2g+1 (use plain P = exp(S - max) for the check) ----
    P = np.exp(S - S.max(1, keepdims=True))
    Pm = np.zeros((H, T))
    pb = np.full(16 * 80, -1, dtype=np.int64)  # dsv4: bf16 P, [head][token] at kPbStride 80 B, in P's area
    for g in range(8):
        for l in range(32):
            srow = 2*g + l//16; scol = 2*(l % 16)
            Pm[srow, scol:scol+2] = P[srow, scol:scol+2]
            if not mla:  # pack_float2<true>(s0, s1) at P area + srow * 80 + 2 scol
                a = srow*80 + 2*scol
                assert (pb[a:a+4] == -1).all(), "a byte of P stored twice"
                w = bf16_bits(np.float32(P[srow, scol])) | bf16_bits(np.float32(P[srow, scol+1])) << 16
                pb[a:a+4] = [(w >> (8*i)) & 0xFF for i in range(4)]
    # ---- (e) per warp: O slice (V = the first 512 columns in both formats) ----
    O = np.zeros((H, 512))
    for g in range(8):
        o = [[[0.0]*4 for _ in range(32)] for n in range(8)]
        V = vslice[g]  # dsv4 warp 7: the raw RoPE area, same layout
        for kk in range(2):
            pa = {}
            if mla:
                for l in range(32):
                    gid, tig = l // 4, l % 4
                    pa[l] = [None]*4
                    for h in range(2):
                        n = 2*kk + h; col = 8*n + 2*tig
                        sc = np.array([sc_of(col, g), sc_of(col+1, g)])
                        pa[l][2*h] = Pm[gid, col:col+2] * sc
                        pa[l][2*h+1] = Pm[gid+8, col:col+2] * sc
            else:  # dsv4: ldmatrix.x4 of bf16 P at P area + (l % 8 + ((l / 8) % 2) * 8) * 80 + (l / 16) * 16 + 32 kk
                frag = ldmatrix([(l % 8 + ((l // 8) % 2) * 8)*80 + (l // 16)*16 + 32*kk for l in range(32)], pb)
                for l in range(32):
                    pa[l] = [np.array(bf16_word_values(frag[l][r])) for r in range(4)]
                    if mutate == "p_scaled":  # the old scales on P as well (kTokenScales left on)
                        tig = l % 4
                        for h in range(2):
                            col = 8*(2*kk + h) + 2*tig
                            sc = np.array([sc_of(col, g), sc_of(col+1, g)])
                            pa[l][2*h] = pa[l][2*h] * sc; pa[l][2*h+1] = pa[l][2*h+1] * sc
            pv_step([pa[l] for l in range(32)], V, kk, o)
        for l in range(32):
            gid, tig = l // 4, l % 4
            for n in range(8):
                col = 64*g + 8*n + 2*tig
                O[gid, col:col+2] = o[n][l][0:2]; O[gid+8, col:col+2] = o[n][l][2:4]
    if mla:
        assert np.allclose(O, Pm @ Kfull[:, :512]), fmt + ": O mismatch"
    else:  # P unscaled, rounded to bf16 once, times the dequantised V (= K) of the reference
        assert (pb[:16*80].reshape(16, 80)[:, :64] >= 0).all(), "a byte of bf16 P not written in (c)"
        Pb = round_bf16(P.astype(np.float32))
        assert np.allclose(O, Pb @ Kfull[:, :512]), fmt + ": O mismatch"


def e4m3_value(code):  # e4m3 (fn) codes -> float64 values (0x7F / 0xFF: NaN)
    code = np.asarray(code)
    sgn = np.where(code & 0x80, -1.0, 1.0)
    e, m = (code >> 3) & 15, code & 7
    v = np.where(e == 0, m * 2.0**-9, (1 + m / 8.0) * np.exp2(e - 7.0))
    return np.where((code & 0x7F) == 0x7F, np.nan, sgn * v)


def round_bf16(x):  # float64 -> nearest bf16 value (ties to even; subnormals down to 2^-133; overflow -> inf)
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ax = np.abs(x)
        _, e = np.frexp(ax)                                # ax = f 2^e, f in [0.5, 1): leading bit 2^(e - 1)
        q = np.exp2(np.maximum(e - 8, -133).astype(np.float64))  # 8 significant bits, the subnormal quantum 2^-133
        r = np.where(np.isfinite(ax), np.rint(ax / np.where(np.isfinite(ax), q, 1.0)) * q, ax)
        r = np.where(r >= 2.0**128, np.inf, r)
        return np.copysign(r, x)


def pow2_bf16_route():
    """dsv4's K words: bf16(e4m3) x bf16(ue8m0_to_float(e)) rounded once to bf16 (bf16x2_mul; the portable and
    Hopper kernels' e4m3x8_pow2_scaled_to_bf16) against the fp32 route (fp32 product rounded to fp32, then to bf16), for
    every finite code and all 256 exponents (e = 0: the subnormal 2^-127, 255: +inf), as tests/gpu/test_dequant.cu does
    on the device; and equal to the reference's value e4m3 x 2^(e - 127) wherever that is a normal bf16 or zero."""
    codes = np.array([c for c in range(256) if (c & 0x7F) != 0x7F])
    v = e4m3_value(codes)[None, :]
    e = np.arange(256)[:, None]
    s = np.where(e == 255, np.inf, np.ldexp(1.0, e - 127))             # ue8m0_to_float
    s_bf16 = round_bf16(np.float32(s).astype(np.float64))              # __float2bfloat162_rn
    assert (s_bf16 == s).all(), "a UE8M0 scale not exact in bf16"
    with np.errstate(invalid="ignore", over="ignore"):
        exact = v * s                                                  # exact in float64 (4 x 1 significant bits)
        got = round_bf16(v * s_bf16)                                   # __hmul2: exact product, one rounding
        want = round_bf16(exact.astype(np.float32).astype(np.float64))  # e4m3x8_scaled_to<true>: fp32, then bf16
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), "bf16 route != fp32 route"
    normal = (np.abs(exact) >= 2.0**-126) & (np.abs(exact) < 2.0**128) | (exact == 0)
    assert (got[normal] == exact[normal]).all(), "bf16 route inexact for a normal result"
    assert normal[114:242].all(), "the writer's scales (2^-13 .. 2^114) give normal results only"


def ldmatrix(rowaddr, mem):  # non-transposed x4: lanes 8 j .. 8 j + 7 give the 16-byte rows of matrix j
    """mem: int64 bytes (-1 = never written); returns r[lane][4] as uint32 words (low half the lower element)."""
    out = [[None]*4 for _ in range(32)]
    for j in range(4):
        for t in range(32):
            a = rowaddr[8*j + t//4] + 4*(t % 4)  # row t / 4 of matrix j, elements 2 (t % 4), + 1
            b = mem[a:a+4]
            assert len(b) == 4 and (b >= 0).all(), "ldmatrix reads a byte of P that (c) did not write"
            out[t][j] = int(b[0]) | int(b[1]) << 8 | int(b[2]) << 16 | int(b[3]) << 24
    return out


def bf16_bits(x):  # float32 -> bf16 bits, round to nearest even (__floats2bfloat162_rn; no NaN / inf here)
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return int(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)


def bf16_word_values(w):  # uint32 of two bf16 -> (low, high) as floats
    return [float(np.uint32((w & 0xFFFF) << 16).view(np.float32)), float(np.uint32(w & 0xFFFF0000).view(np.float32))]


def e4m3_packed_p(rng, swap=False):
    """fp8_e4m3's packed P (0289ac5; fp16 in the kernel, bf16 here: the layout is the same): (c) lane l of warp g stores pack_float2<true>(s0, s1)
    of row srow = 2 g + l / 16, tokens scol = 2 (l % 16) + {0, 1} at P area + srow * 80 + 2 scol; (e) ldmatrix.x4 at
    P area + (l % 8 + ((l / 8) % 2) * 8) * 80 + (l / 16) * 16 + 32 kk gives pa[kk]. Checked: the bytes stay in P's
    area (16 x 40 floats), every byte read was written in (c), the fragments are bit-equal to the fp32 path's
    (pack_float2 of p * 1.0f from the LDS.64 of rows gid, gid + 8, columns 8 n + 2 tig), ldmatrix conflict-free, the
    store in 2 wavefronts (as the fp32 path's 64-bit store), and O = bf16(P) V through the mma with the V
    ldmatrix.trans B fragments of run(). swap: the (l / 8) % 2 and l / 16 roles exchanged (must fail)."""
    PB_STRIDE, P_STRIDE, P_BYTES = 80, 40, 16 * 40 * 4
    # P of one tile as (c) makes it: fp32 in [0, 1], row maxima exactly 1, masked tokens exactly 0
    P = np.exp2(-rng.exponential(3.0, size=(H, T))).astype(np.float32)
    P[np.arange(H), rng.integers(0, T, size=H)] = 1.0
    P[rng.random((H, T)) < 0.1] = 0.0
    # ---- (c): the bf16 store, and the fp32 store of the old path ----
    pb = np.full(P_BYTES, -1, dtype=np.int64)
    psm = np.full(16 * P_STRIDE, np.nan, dtype=np.float32)
    for g in range(8):
        addrs = []
        for l in range(32):
            srow, scol = 2*g + l//16, 2*(l % 16)
            a = srow*PB_STRIDE + 2*scol
            assert a % 4 == 0 and 0 <= a and a + 4 <= P_BYTES, "bf16 P store outside P's area"
            assert (pb[a:a+4] == -1).all(), "a byte of P stored twice"
            w = bf16_bits(P[srow, scol]) | bf16_bits(P[srow, scol+1]) << 16
            pb[a:a+4] = [(w >> (8*i)) & 0xFF for i in range(4)]
            psm[srow*P_STRIDE + scol: srow*P_STRIDE + scol + 2] = P[srow, scol:scol+2]
            addrs.append(a)
        words = {}  # 32-bit store: wavefronts = the most distinct words in one bank
        for a in addrs:
            words.setdefault((a // 4) % 32, set()).add(a // 4)
        assert max(len(v) for v in words.values()) <= 2, "bf16 P store: more wavefronts than the fp32 store's 2"
    # ---- (e), every warp (same P, its own V slice) ----
    for g in range(8):
        V = rng.standard_normal((T, 64))
        o = [[[0.0]*4 for _ in range(32)] for n in range(8)]
        for kk in range(2):
            rowaddr = []
            for l in range(32):
                hr, tc = ((l // 16), (l // 8) % 2) if swap else ((l // 8) % 2, (l // 16))
                a = (l % 8 + hr*8)*PB_STRIDE + tc*16 + 32*kk
                assert a % 16 == 0, "ldmatrix row address not 16-byte aligned"
                rowaddr.append(a)
            assert conflict_free(rowaddr, 16), "P ldmatrix conflicts"
            pa = ldmatrix(rowaddr, pb)
            for l in range(32):  # the fp32 path: LDS.64 of psm, times the scale 1.0f, pack_float2<true>
                gid, tig = l // 4, l % 4
                for h in range(2):
                    col = 8*(2*kk + h) + 2*tig
                    for r, row in ((2*h, gid), (2*h + 1, gid + 8)):
                        v = psm[row*P_STRIDE + col: row*P_STRIDE + col + 2] * np.float32(1.0)
                        assert not np.isnan(v).any()
                        assert pa[l][r] == bf16_bits(v[0]) | bf16_bits(v[1]) << 16, "P fragment != fp32 path's"
            a_vals = [[bf16_word_values(pa[l][r]) for r in range(4)] for l in range(32)]
            pv_step(a_vals, V, kk, o)  # V B fragments as run() builds them
        O = np.zeros((H, 64))
        for l in range(32):
            gid, tig = l // 4, l % 4
            for n in range(8):
                O[gid, 8*n+2*tig: 8*n+2*tig+2] = o[n][l][0:2]; O[gid+8, 8*n+2*tig: 8*n+2*tig+2] = o[n][l][2:4]
        Pb = np.array([[bf16_word_values(bf16_bits(P[i, j]))[0] for j in range(T)] for i in range(H)])
        assert np.allclose(O, Pb @ V), "packed P: O mismatch"
    written = pb[:16*PB_STRIDE].reshape(16, PB_STRIDE)
    assert (written[:, :64] >= 0).all() and (written[:, 64:] == -1).all() and (pb[16*PB_STRIDE:] == -1).all()


def dsmla_bytes(rng):
    """The dsmla gather and reads at byte level: few_rows::DsMla's offsets, 656-byte rows."""
    FP8_STRIDE, ROPE_STRIDE, ROPE_OFF = 576, 144, 32 * 576
    rows = rng.integers(0, 256, size=(T, 656), dtype=np.uint8)
    stage = np.full(32 * 576 + 32 * 144, -1, dtype=np.int64)
    slot = np.full(4 * 32 * 4, -1, dtype=np.int64)
    for w in range(8):
        for l in range(32):
            g_row, g_piece = 4*w + l // 8, l % 8
            src = 16 * g_piece  # row + ... (few_rows.cuh: src = base + 16 g_piece)
            for i in range(4):
                dst = g_row*FP8_STRIDE + (g_piece + 8*i)*16
                stage[dst:dst+16] = rows[g_row, src + 128*i: src + 128*i + 16]
            dst = ROPE_OFF + g_row*ROPE_STRIDE + g_piece*16
            stage[dst:dst+16] = rows[g_row, src + 528: src + 528 + 16]
            if g_piece < 4:
                dst = (g_piece*32 + g_row)*4
                s = src - 12*g_piece + 512
                assert s == 512 + 4*g_piece
                slot[dst:dst+4] = rows[g_row, s:s+4]
    for g in range(8):
        # K: LDS.128 at tok * 576 + 64 g + 16 tig = row bytes [64 g + 16 tig, + 16)
        for n in range(4):
            addrs = []
            for l in range(32):
                gid, tig = l // 4, l % 4
                tok = 8*n + gid
                a = tok*FP8_STRIDE + 64*g + 16*tig
                addrs.append(a)
                assert (stage[a:a+16] == rows[tok, 64*g+16*tig: 64*g+16*tig+16]).all()
            assert conflict_free(addrs, 16), "K LDS.128 conflicts"
            # RoPE: LDS.32 at RoPE area + tok * 144 + 16 g + 4 tig = columns 8 g + 2 tig, + 1 (bytes 528 + 16 g + 4 tig)
            addrs = []
            for l in range(32):
                gid, tig = l // 4, l % 4
                tok = 8*n + gid
                a = ROPE_OFF + tok*ROPE_STRIDE + 16*g + 4*tig
                addrs.append(a)
                assert (stage[a:a+4] == rows[tok, 528 + 2*(8*g + 2*tig): 528 + 2*(8*g + 2*tig) + 4]).all()
            assert conflict_free(addrs, 4), "RoPE LDS.32 conflicts"
            # scales: LDS.64 at (g / 2) * 128 + 8 tig + 32 n = tokens 8 n + 2 tig, + 1 of group g / 2
            addrs = []
            for l in range(32):
                tig = l % 4
                a = (g // 2)*128 + 8*tig + 32*n
                addrs.append(a)
                for j in range(2):
                    tok = 8*n + 2*tig + j
                    assert (slot[a+4*j:a+4*j+4] == rows[tok, 512 + 4*(g//2): 512 + 4*(g//2) + 4]).all()
            assert conflict_free(addrs, 8), "scale LDS.64 conflicts"
    for tok in range(T):  # every used byte written (the 64 + 16 bytes of padding per row are not)
        assert (stage[tok*FP8_STRIDE: tok*FP8_STRIDE + 512] >= 0).all()
        assert (stage[ROPE_OFF + tok*ROPE_STRIDE: ROPE_OFF + tok*ROPE_STRIDE + 128] >= 0).all()
    assert (slot >= 0).all(), "every stage and slot byte written"


def e4m3_bytes(rng):
    """The fp8_e4m3 gather and reads at byte level (few_rows::E4m3, the prepared smxx-few-rows-e4m3.patch): 576-byte
    rows of e4m3 (the 64 RoPE columns at bytes 512..575), DsMla's stage layout, the RoPE bytes in the RoPE area's first
    64 bytes of each 144-byte row, read as 2 bytes (columns 8 g + 2 tig, + 1) per lane; no scales. Its S and O are
    dsmla's with every scale 1 (run() checks those maps)."""
    FP8_STRIDE, ROPE_STRIDE, ROPE_OFF = 576, 144, 32 * 576
    rows = rng.integers(0, 256, size=(T, 576), dtype=np.uint8)
    stage = np.full(32 * 576 + 32 * 144, -1, dtype=np.int64)
    for w in range(8):
        for l in range(32):
            g_row, g_piece = 4*w + l // 8, l % 8
            src = 16 * g_piece
            for i in range(4):
                dst = g_row*FP8_STRIDE + (g_piece + 8*i)*16
                stage[dst:dst+16] = rows[g_row, src + 128*i: src + 128*i + 16]
            if g_piece < 4:  # src + kDimV: bytes 512 + 16 g_piece
                dst = ROPE_OFF + g_row*ROPE_STRIDE + g_piece*16
                stage[dst:dst+16] = rows[g_row, src + 512: src + 512 + 16]
    for g in range(8):
        for n in range(4):
            for l in range(32):
                gid, tig = l // 4, l % 4
                tok = 8*n + gid
                a = tok*FP8_STRIDE + 64*g + 16*tig
                assert (stage[a:a+16] == rows[tok, 64*g+16*tig: 64*g+16*tig+16]).all()
            # RoPE: LDS.U16 at RoPE area + tok * 144 + 8 g + 2 tig = the e4m3 bytes of columns 8 g + 2 tig, + 1
            words = {}
            for l in range(32):
                gid, tig = l // 4, l % 4
                tok = 8*n + gid
                a = ROPE_OFF + tok*ROPE_STRIDE + 8*g + 2*tig
                assert (stage[a:a+2] == rows[tok, 512 + 8*g + 2*tig: 512 + 8*g + 2*tig + 2]).all()
                word = a // 4  # a 2-byte load: one word; lanes reading the same word share it (no conflict)
                assert words.setdefault(word % 32, word) == word, "RoPE LDS.U16 conflicts"
    for tok in range(T):
        assert (stage[tok*FP8_STRIDE: tok*FP8_STRIDE + 512] >= 0).all()
        assert (stage[ROPE_OFF + tok*ROPE_STRIDE: ROPE_OFF + tok*ROPE_STRIDE + 64] >= 0).all()


def dsv4_bytes(rng):
    """The dsv4 gather warp and the reads of its stage, at byte level: few_rows::DsV4's offsets, 576-byte token
    blocks (448 e4m3 + 128 RoPE bytes) and 8-byte scale blocks; some rows invalid (zero-fill, flag 0)."""
    FP8_STRIDE, ROPE_STRIDE, ROPE_OFF, SCALE_OFF, STAGE = 448, 144, 32 * 448, 32 * 448 + 32 * 144, 19200
    tok_blk = rng.integers(0, 256, size=(T, 576), dtype=np.uint8)
    scl_blk = rng.integers(100, 150, size=(T, 8), dtype=np.uint8)
    row_ok = rng.random(T) > 0.25
    stage = np.full(STAGE, -1, dtype=np.int64)
    writes = np.zeros(STAGE, dtype=np.int64)
    valid = [None] * T

    def copy(dst, blk, off, n, ok):  # cp.async: src-size 0 (no row) writes n zero bytes and reads nothing
        stage[dst:dst+n] = blk[off:off+n] if ok else 0
        writes[dst:dst+n] += 1

    # lane l holds row l's id (ref.row, ref.scales); the row addresses are shuffled from lane row = l / 4 + 8 k
    for l in range(32):
        valid[l] = int(row_ok[l])
        copy(SCALE_OFF + l*8, scl_blk[l], 0, 8, row_ok[l])
    for k in range(4):
        for j in range(9):  # one copy instruction: 8 rows x 64 contiguous bytes
            per_row = {}
            for l in range(32):
                row, c16 = l // 4 + 8*k, 16 * (l % 4)
                if j < 7:
                    src = c16 + 64*j; dst = row*FP8_STRIDE + c16 + 64*j
                else:
                    src = 448 + c16 + 64*(j - 7); dst = ROPE_OFF + row*ROPE_STRIDE + c16 + 64*(j - 7)
                copy(dst, tok_blk[row], src, 16, row_ok[row])
                per_row.setdefault(row, []).append(src)
            assert len(per_row) == 8 and all(sorted(v) == list(range(min(v), min(v) + 64, 16)) and min(v) % 64 == 0
                                             for v in per_row.values()), "8 rows x 64 contiguous bytes per copy"
    for tok in range(T):  # every used byte written exactly once, with the row's bytes or zeros
        want = tok_blk[tok] if row_ok[tok] else np.zeros(576, dtype=np.uint8)
        a = tok*FP8_STRIDE; assert (writes[a:a+448] == 1).all() and (stage[a:a+448] == want[:448]).all()
        a = ROPE_OFF + tok*ROPE_STRIDE; assert (writes[a:a+128] == 1).all() and (stage[a:a+128] == want[448:]).all()
        assert (writes[a+128:a+144] == 0).all(), "RoPE row padding untouched"
        a = SCALE_OFF + tok*8; assert (writes[a:a+8] == 1).all()
        assert (stage[a:a+8] == (scl_blk[tok] if row_ok[tok] else 0)).all()
    # the scale table: lane l of warp g < 7 decodes byte g of token l's block into a bf16x2 word (both halves the bf16
    # of ue8m0_to_float; invalid rows: byte 0, the subnormal 2^-127 (0x0040) times K's zeros); the RoPE warp writes
    # none. (a) reads the 32-bit word sc_tab[g][8 n + gid] for K's B column, token 8 n + gid
    sc_tab = np.full(8 * 32, -1, dtype=np.int64)  # words; -1: never written
    for g in range(7):
        for l in range(32):
            e = int(stage[SCALE_OFF + l*8 + g])
            bits = bf16_bits(np.uint32(0x00400000 if e == 0 else e << 23).view(np.float32))  # ue8m0_to_float, rn
            sc_tab[g*32 + l] = bits | bits << 16
    assert (sc_tab[7*32:] == -1).all(), "the RoPE warp writes no sc_tab row"
    for g in range(8):
        for n in range(4):
            if g < 7:
                addrs = []
                for l in range(32):
                    gid = l // 4
                    a = g*128 + 4*(8*n + gid); addrs.append(a)
                    tok = 8*n + gid
                    e = int(scl_blk[tok][g]) if row_ok[tok] else 0
                    want = bf16_bits(np.float32(np.ldexp(1.0, e - 127)))
                    assert sc_tab[a // 4] == want | want << 16, "sc_tab word != the token's scale"
                    assert want == (0x0040 if e == 0 else e << 7)
                assert conflict_free(addrs, 4), "sc_tab LDS.32 conflicts"
            # K (g < 7): LDS.128 at tok * 448 + 64 g + 16 tig; RoPE (warp 7): LDS.128 x2 at tok * 144 + 32 tig (+ 16)
            for half in (range(2) if g == 7 else range(1)):
                addrs = []
                for l in range(32):
                    gid, tig = l // 4, l % 4
                    tok = 8*n + gid
                    a = (tok*FP8_STRIDE + 64*g + 16*tig) if g < 7 else (ROPE_OFF + tok*ROPE_STRIDE + 32*tig + 16*half)
                    b = (64*g + 16*tig) if g < 7 else (448 + 32*tig + 16*half)
                    assert (stage[a:a+16] == (tok_blk[tok][b:b+16] if row_ok[tok] else 0)).all()
                    addrs.append(a)
                assert conflict_free(addrs, 16), "K LDS.128 conflicts"
    assert valid == [int(v) for v in row_ok]


rng = np.random.default_rng(1)
for fmt in ("dsv4", "dsmla"):
    run(fmt, rng)
pow2_bf16_route()
for mutate in ("tok_2tig", "group", "v_unscaled", "p_scaled", "warp7_table"):  # the dsv4 check can fail
    try:
        run("dsv4", np.random.default_rng(2), mutate)
        raise SystemExit("dsv4 scaled K: mutation " + mutate + " passed")
    except AssertionError:
        pass
dsmla_bytes(rng)
e4m3_bytes(rng)
dsv4_bytes(rng)
e4m3_packed_p(rng)
try:  # the check can fail: ldmatrix's matrices 1 and 2 exchanged (heads 8-15 <-> tokens 8-15)
    e4m3_packed_p(rng, swap=True)
    raise SystemExit("packed P: a swapped ldmatrix address map passed")
except AssertionError:
    pass
print("S and O match for dsv4 and dsmla: fragment maps, d-permutation, m16n8k8 RoPE step, scales on S and P (dsmla) "
      "or on K's bf16 words (dsv4: exact, V from the same words, S and P unscaled, P packed and read by ldmatrix), "
      "ldmatrix.trans V; UE8M0 x e4m3 bf16 route; dsmla and e4m3 gather bytes and bank patterns; dsv4 gather-warp "
      "copy map, scale table (bf16x2) and reads; e4m3 packed P (bf16 store, ldmatrix.x4 A fragments)")
