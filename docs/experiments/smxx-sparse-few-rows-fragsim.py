# Emulates one 32-token tile of decode_few_rows_dsv4's index maps (src/cuda/decode/sm80/few_rows.cuh) with the PTX
# m16n8k16 fragment layouts and ldmatrix.x4.trans, and compares S and O against plain matrix products: Q's and K's
# d-permutation, the UE8M0 scales applied to partial S and to P, the S-partial / P layouts and the V addresses. float64
# values: it checks indices, not rounding. Usage: python3 docs/experiments/smxx-sparse-few-rows-fragsim.py (numpy).
import numpy as np
rng = np.random.default_rng(1)
H = 16; D = 512; T = 32
Q = rng.standard_normal((H, D))
Kraw = rng.standard_normal((T, D))          # "unscaled" values (e4m3 codes for dims < 448, bf16 for RoPE)
scale = 2.0 ** rng.integers(-3, 4, size=(T, 7))  # UE8M0 per token, group g = dims [64g, 64g+64)
Kfull = Kraw.copy()
for g in range(7): Kfull[:, 64*g:64*g+64] *= scale[:, g:g+1]

def mma(a, b, c):   # a[lane][4][2], b[lane][2][2], c[lane][4] -> d[lane][4]
    A = np.zeros((16, 16)); B = np.zeros((16, 8)); C = np.zeros((16, 8))
    for l in range(32):
        gid, tig = l // 4, l % 4
        for e in range(2):
            A[gid][2*tig+e] = a[l][0][e]; A[gid+8][2*tig+e] = a[l][1][e]
            A[gid][2*tig+8+e] = a[l][2][e]; A[gid+8][2*tig+8+e] = a[l][3][e]
            B[2*tig+e][gid] = b[l][0][e]; B[2*tig+8+e][gid] = b[l][1][e]
            C[gid][2*tig+e] = c[l][e]; C[gid+8][2*tig+e] = c[l][2+e]
    Dm = A @ B + C
    return [[Dm[l//4][2*(l%4)], Dm[l//4][2*(l%4)+1], Dm[l//4+8][2*(l%4)], Dm[l//4+8][2*(l%4)+1]] for l in range(32)]

def ldmatrix_trans(rowaddr):  # rowaddr[lane] -> function(addr) gives 8 values; returns r[lane][4][2]
    out = [[None]*4 for _ in range(32)]
    for j in range(4):
        M = np.array([rowaddr[8*j + i] for i in range(8)])  # stored 8x8 matrix j: row i from lane 8j+i
        for t in range(32):
            out[t][j] = [M[2*(t%4)][t//4], M[2*(t%4)+1][t//4]]
    return out

# ---- per warp g: Q K^T ----
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
            kb[l] = [vals[2*i:2*i+2] for i in range(8)]
            vslice[g, tok, 16*tig:16*tig+16] = vals       # STS.128 x2 at row tok, byte 32 tig
        for s in range(4):
            acc[n] = mma([qa[l][s] for l in range(32)], [[kb[l][2*s], kb[l][2*s+1]] for l in range(32)], acc[n])
    for l in range(32):
        gid, tig = l // 4, l % 4
        for n in range(4):
            for j in range(2):
                tokc = 8*n + 2*tig + j
                sc = scale[tokc, g] if g < 7 else 1.0
                spart[g, gid, tokc] = acc[n][l][j] * sc
                spart[g, gid+8, tokc] = acc[n][l][2+j] * sc
S = spart.sum(0)
assert np.allclose(S, Q @ Kfull.T), "S mismatch"
# ---- (c) per warp: rows 2g, 2g+1 (use plain P = exp(S - max) for the check) ----
P = np.exp(S - S.max(1, keepdims=True))
Pm = np.zeros((H, T))
for g in range(8):
    for l in range(32):
        srow = 2*g + l//16; scol = 2*(l % 16)
        Pm[srow, scol:scol+2] = P[srow, scol:scol+2]
# ---- (e) per warp: O slice ----
O = np.zeros((H, 512))
for g in range(8):
    o = [[[0.0]*4 for _ in range(32)] for n in range(8)]
    V = vslice[g]  # warp 7: the raw RoPE area, same layout
    for kk in range(2):
        pa = {}
        for l in range(32):
            gid, tig = l // 4, l % 4
            pa[l] = [None]*4
            for h in range(2):
                n = 2*kk + h; col = 8*n + 2*tig
                sc = np.array([scale[col, g], scale[col+1, g]]) if g < 7 else np.ones(2)
                pa[l][2*h] = Pm[gid, col:col+2] * sc
                pa[l][2*h+1] = Pm[gid+8, col:col+2] * sc
        for np_ in range(4):
            rows = []
            for l in range(32):
                tok = 16*kk + l % 8 + ((l // 8) % 2) * 8
                c0 = (l // 16) * 8 + np_ * 16
                rows.append(V[tok, c0:c0+8])
            b = ldmatrix_trans(rows)
            o[2*np_] = mma([pa[l] for l in range(32)], [[b[l][0], b[l][1]] for l in range(32)], o[2*np_])
            o[2*np_+1] = mma([pa[l] for l in range(32)], [[b[l][2], b[l][3]] for l in range(32)], o[2*np_+1])
    for l in range(32):
        gid, tig = l // 4, l % 4
        for n in range(8):
            col = 64*g + 8*n + 2*tig
            O[gid, col:col+2] = o[n][l][0:2]; O[gid+8, col:col+2] = o[n][l][2:4]
assert np.allclose(O, Pm @ Kfull), "O mismatch"
print("S and O match: fragment maps, d-permutation, scales on S and P, ldmatrix.trans V")
