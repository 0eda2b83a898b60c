/* Kernel bodies, included by cpu_kernels.c once per element type with T, SFX, EXP and SOFTPLUS
 * defined. See ops/selective_scan/README.md for the math and Note [selective scan backward].
 *
 * Layouts (all contiguous, prepared by the Python side):
 *   u, delta, z, out, du, ddelta, dz: (batch, dim, L)
 *   Bt, Ct, dBt, dCt:                 (batch, G, L, N)   (B, C transposed so a timestep's N
 *                                                         values are adjacent)
 *   A, dA: (dim, N);  D, bias, dD, dbias: (dim);  h0, last, dlast, dh0: (batch, dim, N)
 *   ckpt: (batch, dim, ceil(L/K) + 1, N), the state before each chunk of K steps, then the final
 *         state.
 * A "row" is one (b, d) pair, row = b * dim + d; a call handles rows [row_begin, row_end).
 * Workspace: at least (2*K*N + 8*K + 4*N) elements of T, private to the call.
 */
#define SSM_CAT2(a, b) a##_##b
#define SSM_CAT(a, b) SSM_CAT2(a, b)
#define SSM_FN(name) SSM_CAT(name, SFX)

/* dt for one chunk: dt[i] = softplus?(delta[i] + bias). */
SSM_INLINE void SSM_FN(chunk_dt)(const T* delta, T bias, int softplus, int64_t n, T* dt) {
    if (softplus) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) dt[i] = SOFTPLUS(delta[i] + bias);
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) dt[i] = delta[i] + bias;
    }
}

/* Sum of p[0..16) as a pairwise tree over vector halves: GCC vectorizes each level, where an
 * `omp simd` reduction ends in a serial chain of scalar adds (measured 2x slower overall). */
SSM_INLINE T SSM_FN(sum16)(T* p) {
    for (int w = 8; w >= 1; w /= 2)
#pragma omp simd
        for (int n = 0; n < w; ++n) p[n] += p[n + w];
    return p[0];
}

/* E[i, n] = exp(dt_i A_n) for a chunk: independent of the state, so computed in one flat,
 * vectorized pass before the (latency-bound) recurrence. */
SSM_INLINE void SSM_FN(chunk_decay)(const T* restrict Ad, const T* restrict dt, int64_t n_t,
                                    int64_t N, T* restrict E) {
    for (int64_t i = 0; i < n_t; ++i) {
        const T dti = dt[i];
        T* Ei = E + i * N;
#pragma omp simd
        for (int64_t n = 0; n < N; ++n) Ei[n] = EXP(dti * Ad[n]);
    }
}

/* n_t steps h <- E_t h + dt_t u_t B_t, y_t = C_t . h. Inlined with a constant N for N = 16. */
SSM_INLINE void SSM_FN(chunk_steps)(const T* restrict E, const T* restrict Bp,
                                    const T* restrict Cp, const T* restrict dt,
                                    const T* restrict uc, int64_t n_t, int64_t N, T* restrict h,
                                    T* restrict y) {
    for (int64_t i = 0; i < n_t; ++i) {
        const T dtu = dt[i] * uc[i];
        const T* Ei = E + i * N;
        const T* Bi = Bp + i * N;
        const T* Ci = Cp + i * N;
        if (N == 16) {
            T p[16];
#pragma omp simd
            for (int n = 0; n < 16; ++n) {
                const T hn = Ei[n] * h[n] + dtu * Bi[n];
                h[n] = hn;
                p[n] = Ci[n] * hn;
            }
            y[i] = SSM_FN(sum16)(p);
            continue;
        }
        T acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t n = 0; n < N; ++n) {
            const T hn = Ei[n] * h[n] + dtu * Bi[n];
            h[n] = hn;
            acc += Ci[n] * hn;
        }
        y[i] = acc;
    }
}

void SSM_FN(ssm_fwd)(const T* u, const T* delta, const T* A, const T* Bt, const T* Ct,
                     const T* D, const T* z, const T* bias, const T* h0, int softplus,
                     int64_t dim, int64_t L, int64_t N, int64_t G, int64_t K,
                     int64_t row_begin, int64_t row_end,
                     T* out, T* last, T* ckpt, T* work) {
    const int64_t nck = (L + K - 1) / K;
    const int64_t dpg = dim / G;
    T* h = work;          /* N */
    T* dt = work + N;     /* K */
    T* y = dt + K;        /* K */
    T* E = y + K;         /* K*N: exp(dt_t A) of the chunk */
    for (int64_t row = row_begin; row < row_end; ++row) {
        const int64_t b = row / dim, d = row % dim, g = d / dpg;
        const T* Ad = A + d * N;
        const T bias_d = bias ? bias[d] : (T)0;
        const T D_d = D ? D[d] : (T)0;
        const int64_t o = row * L;
        if (h0) memcpy(h, h0 + row * N, N * sizeof(T));
        else memset(h, 0, N * sizeof(T));
        for (int64_t c = 0; c < nck; ++c) {
            const int64_t t0 = c * K, n_t = (L - t0 < K) ? L - t0 : K;
            memcpy(ckpt + (row * (nck + 1) + c) * N, h, N * sizeof(T));
            SSM_FN(chunk_dt)(delta + o + t0, bias_d, softplus, n_t, dt);
            SSM_FN(chunk_decay)(Ad, dt, n_t, N, E);
            const T* Bp = Bt + ((b * G + g) * L + t0) * N;
            const T* Cp = Ct + ((b * G + g) * L + t0) * N;
            if (N == 16) SSM_FN(chunk_steps)(E, Bp, Cp, dt, u + o + t0, n_t, 16, h, y);
            else SSM_FN(chunk_steps)(E, Bp, Cp, dt, u + o + t0, n_t, N, h, y);
            const T* uc = u + o + t0;
            T* oc = out + o + t0;
            if (z) {
                const T* zc = z + o + t0;
#pragma omp simd
                for (int64_t i = 0; i < n_t; ++i)
                    oc[i] = (y[i] + D_d * uc[i]) * (zc[i] / ((T)1 + EXP(-zc[i])));
            } else {
#pragma omp simd
                for (int64_t i = 0; i < n_t; ++i) oc[i] = y[i] + D_d * uc[i];
            }
        }
        memcpy(last + row * N, h, N * sizeof(T));
        memcpy(ckpt + (row * (nck + 1) + nck) * N, h, N * sizeof(T));
    }
}

/* Note [selective scan backward]
 * With dA_t = exp(dt_t A), h_t = dA_t h_{t-1} + dt_t B_t u_t, y_t = C_t.h_t + D u_t and
 * out_t = y_t silu(z_t), let dy_t = dout_t silu(z_t) and g_t = dL/dh_t (all paths), so that
 *   g_t = dy_t C_t + dA_{t+1} g_{t+1},   g_{L-1} = dy_{L-1} C_{L-1} + dlast.
 * Then, per (b, d) and summed where a parameter is shared:
 *   dC_t  += dy_t h_t                       dB_t += g_t dt_t u_t
 *   du_t   = dy_t D + dt_t (g_t . B_t)      dD   += dy_t u_t
 *   ddt_t  = g_t . (A dA_t h_{t-1} + B_t u_t)
 *   dA    += g_t dA_t h_{t-1} dt_t           dh0   = dA_0 g_0
 *   dz_t   = dout_t (y_t) silu'(z_t),        silu'(z) = s (1 + z (1 - s)), s = sigmoid(z)
 *   ddelta_t = ddt_t sigmoid(delta_t + bias) with softplus (else ddt_t); dbias += ddelta_t.
 * The states h_t of a chunk are recomputed from its checkpoint, then the chunk is walked
 * backwards; chunks are visited last to first, carrying dA_{t0} g_{t0} into the previous one.
 */
void SSM_FN(ssm_bwd)(const T* dout, const T* dlast, const T* u, const T* delta, const T* A,
                     const T* Bt, const T* Ct, const T* D, const T* z, const T* bias,
                     const T* ckpt, int softplus,
                     int64_t dim, int64_t L, int64_t N, int64_t G, int64_t K,
                     int64_t row_begin, int64_t row_end,
                     T* du, T* ddelta, T* dz, T* dA, T* dBt, T* dCt, T* dD, T* dbias, T* dh0,
                     T* work) {
    const int64_t nck = (L + K - 1) / K;
    const int64_t dpg = dim / G;
    T* hs = work;            /* K*N: h_t of the chunk */
    T* dAs = hs + K * N;     /* K*N: dA_t of the chunk */
    T* dt = dAs + K * N;     /* K */
    T* dy = dt + K;          /* K */
    T* ddt = dy + K;         /* K */
    T* y = ddt + K;          /* K */
    T* dsp = y + K;          /* K: d softplus / d x */
    T* g = dsp + K;          /* N: dL/dh carried backwards, already times dA_{t+1} */
    T* dAacc = g + N;        /* N: dA of the row's chunks so far */
    T* dAc = dAacc + N;      /* N: dA of the current chunk */
    for (int64_t row = row_begin; row < row_end; ++row) {
        const int64_t b = row / dim, d = row % dim, gr = d / dpg;
        const T* Ad = A + d * N;
        const T bias_d = bias ? bias[d] : (T)0;
        const T D_d = D ? D[d] : (T)0;
        const int64_t o = row * L;
        if (dlast) memcpy(g, dlast + row * N, N * sizeof(T));
        else memset(g, 0, N * sizeof(T));
        memset(dAacc, 0, N * sizeof(T));
        T dD_acc = 0, dbias_acc = 0;
        for (int64_t c = nck - 1; c >= 0; --c) {
            const int64_t t0 = c * K, n_t = (L - t0 < K) ? L - t0 : K;
            const T* h_init = ckpt + (row * (nck + 1) + c) * N;
            /* the sums over L in two levels, the chunk's then the row's (Note [long sums] in
             * ops/selective_scan/shapes.py) */
            T dD_c = 0, dbias_c = 0;
            memset(dAc, 0, N * sizeof(T));
            const T* uc = u + o + t0;
            const T* Bc = Bt + ((b * G + gr) * L + t0) * N;
            const T* Cc = Ct + ((b * G + gr) * L + t0) * N;
            T* dBc = dBt + ((b * G + gr) * L + t0) * N;
            T* dCc = dCt + ((b * G + gr) * L + t0) * N;
            SSM_FN(chunk_dt)(delta + o + t0, bias_d, softplus, n_t, dt);
            if (softplus) {
                const T* dc = delta + o + t0;
#pragma omp simd
                for (int64_t i = 0; i < n_t; ++i) {
                    const T x = dc[i] + bias_d;
                    dsp[i] = x > (T)20 ? (T)1 : (T)1 / ((T)1 + EXP(-x));
                }
            }
            /* recompute the chunk's states */
            SSM_FN(chunk_decay)(Ad, dt, n_t, N, dAs);
            for (int64_t i = 0; i < n_t; ++i) {
                const T dtu = dt[i] * uc[i];
                const T* hp = i ? hs + (i - 1) * N : h_init;
                T* hi = hs + i * N;
                const T* ai = dAs + i * N;
                const T* Bp = Bc + i * N;
                const T* Cp = Cc + i * N;
                if (N == 16) {
                    T p[16];
#pragma omp simd
                    for (int n = 0; n < 16; ++n) {
                        const T hn = ai[n] * hp[n] + dtu * Bp[n];
                        hi[n] = hn;
                        p[n] = Cp[n] * hn;
                    }
                    y[i] = SSM_FN(sum16)(p);
                    continue;
                }
                T acc = 0;
#pragma omp simd reduction(+ : acc)
                for (int64_t n = 0; n < N; ++n) {
                    const T hn = ai[n] * hp[n] + dtu * Bp[n];
                    hi[n] = hn;
                    acc += Cp[n] * hn;
                }
                y[i] = acc;
            }
            /* output gate */
            const T* doc = dout + o + t0;
            if (z) {
                const T* zc = z + o + t0;
                T* dzc = dz + o + t0;
#pragma omp simd
                for (int64_t i = 0; i < n_t; ++i) {
                    const T s = (T)1 / ((T)1 + EXP(-zc[i]));
                    const T yy = y[i] + D_d * uc[i];
                    dzc[i] = doc[i] * yy * s * ((T)1 + zc[i] * ((T)1 - s));
                    dy[i] = doc[i] * zc[i] * s;
                }
            } else {
#pragma omp simd
                for (int64_t i = 0; i < n_t; ++i) dy[i] = doc[i];
            }
            /* walk the chunk backwards */
            for (int64_t i = n_t - 1; i >= 0; --i) {
                const T dti = dt[i], dyi = dy[i], ui = uc[i], dtu = dti * ui;
                const T* hp = i ? hs + (i - 1) * N : h_init;
                const T* hi = hs + i * N;
                const T* ai = dAs + i * N;
                const T* Bp = Bc + i * N;
                const T* Cp = Cc + i * N;
                T* dBp = dBc + i * N;
                T* dCp = dCc + i * N;
                T ddt_acc = 0, gB = 0;
                if (N == 16) {
                    /* the same step with pairwise tree sums (see fwd chunk_steps) */
                    T pa[16], pb[16];
#pragma omp simd
                    for (int n = 0; n < 16; ++n) {
                        const T gn = g[n] + dyi * Cp[n];
                        const T ghd = gn * hp[n] * ai[n];
                        dCp[n] += dyi * hi[n];
                        dBp[n] += gn * dtu;
                        dAc[n] += ghd * dti;
                        pa[n] = ghd * Ad[n];
                        pb[n] = gn * Bp[n];
                        g[n] = gn * ai[n];
                    }
                    gB = SSM_FN(sum16)(pb);
                    ddt_acc = SSM_FN(sum16)(pa) + gB * ui;
                    du[o + t0 + i] = dyi * D_d + dti * gB;
                    ddt[i] = ddt_acc;
                    dD_c += dyi * ui;
                    continue;
                }
#pragma omp simd reduction(+ : ddt_acc, gB)
                for (int64_t n = 0; n < N; ++n) {
                    const T gn = g[n] + dyi * Cp[n];
                    const T ghd = gn * hp[n] * ai[n];
                    dCp[n] += dyi * hi[n];
                    dBp[n] += gn * dtu;
                    dAc[n] += ghd * dti;
                    ddt_acc += ghd * Ad[n] + gn * Bp[n] * ui;
                    gB += gn * Bp[n];
                    g[n] = gn * ai[n];
                }
                du[o + t0 + i] = dyi * D_d + dti * gB;
                ddt[i] = ddt_acc;
                dD_c += dyi * ui;
            }
            T* ddc = ddelta + o + t0;
            if (softplus) {
#pragma omp simd reduction(+ : dbias_c)
                for (int64_t i = 0; i < n_t; ++i) {
                    ddc[i] = ddt[i] * dsp[i];
                    dbias_c += ddc[i];
                }
            } else {
#pragma omp simd reduction(+ : dbias_c)
                for (int64_t i = 0; i < n_t; ++i) {
                    ddc[i] = ddt[i];
                    dbias_c += ddc[i];
                }
            }
            for (int64_t n = 0; n < N; ++n) dAacc[n] += dAc[n];
            dD_acc += dD_c;
            dbias_acc += dbias_c;
        }
        memcpy(dh0 + row * N, g, N * sizeof(T));
        for (int64_t n = 0; n < N; ++n) dA[d * N + n] += dAacc[n];
        dD[d] += dD_acc;
        dbias[d] += dbias_acc;
    }
}

/* h_t = a_t h_{t-1} + b_t over rows of a (L, M) time-major layout, columns [m_begin, m_end);
 * from the last t to the first when reverse. h0: (M) or NULL. Columns are walked in blocks so the
 * carried state stays in L1. */
void SSM_FN(lin_scan)(const T* a, const T* b, const T* h0, int reverse, int64_t L, int64_t M,
                      int64_t m_begin, int64_t m_end, T* out) {
    enum { BLK = 512 };
    T h[BLK];
    for (int64_t m0 = m_begin; m0 < m_end; m0 += BLK) {
        const int64_t w = (m_end - m0 < BLK) ? m_end - m0 : BLK;
        if (h0) memcpy(h, h0 + m0, w * sizeof(T));
        else memset(h, 0, w * sizeof(T));
        for (int64_t s = 0; s < L; ++s) {
            const int64_t t = reverse ? L - 1 - s : s;
            const T* at = a + t * M + m0;
            const T* bt = b + t * M + m0;
            T* ot = out + t * M + m0;
#pragma omp simd
            for (int64_t j = 0; j < w; ++j) {
                const T hj = at[j] * h[j] + bt[j];
                h[j] = hj;
                ot[j] = hj;
            }
        }
    }
}

/* One decode step of the selective scan, in place, on a state (rows, H, P, N) with N contiguous
 * (Mamba-2's layout; Mamba-1's (rows, dim, N) is H = dim, P = 1):
 *   d = softplus?(dt + bias), h = exp(d A) h + d x B_g, out = (C_g . h + D x) silu?(z),
 * g = head / (H / G). Every other tensor is addressed through element strides, so views with zero
 * strides (A, dt, D, bias expanded over headdim, as transformers and mamba-ssm pass them) are read
 * without being materialized; A with a zero stride along N takes one exponential per (head, p).
 * st: state (row, h, p), x (b, h, p), dt (b, h, p), z (b, h, p), A (h, p, n), B (b, g), C (b, g),
 * D (h, p), bias (h, p); B and C are contiguous along N. idx (batch,) or NULL: the state row of
 * entry b (negative: a padding entry, out 0, no row touched). out (batch, H, P) contiguous.
 * A call handles items [item_begin, item_end), item = b * H + h; distinct entries pick distinct
 * rows, so calls on disjoint item ranges write disjoint memory. */
void SSM_FN(ssu_step)(T* state, const T* x, const T* dt, const T* z, const T* A, const T* Bm,
                      const T* Cm, const T* D, const T* bias, const int64_t* idx, int softplus,
                      int64_t H, int64_t P, int64_t N, int64_t G, const int64_t* st,
                      int64_t item_begin, int64_t item_end, T* out) {
    const int64_t hpg = H / G;
    for (int64_t item = item_begin; item < item_end; ++item) {
        const int64_t b = item / H, h = item % H, g = h / hpg;
        const int64_t row = idx ? idx[b] : b;
        T* o = out + item * P;
        if (row < 0) {
            for (int64_t p = 0; p < P; ++p) o[p] = (T)0;
            continue;
        }
        const T* restrict Bn = Bm + b * st[15] + g * st[16];
        const T* restrict Cn = Cm + b * st[17] + g * st[18];
        /* dt, bias and A expanded over p (zero strides): one softplus and one exp per head */
        const int d_varies = st[8] != 0 || (bias && st[22] != 0);
        const int dA_varies = d_varies || st[13] != 0;
        T d = 0, dA = 0;
        for (int64_t p = 0; p < P; ++p) {
            if (p == 0 || d_varies) {
                d = dt[b * st[6] + h * st[7] + p * st[8]];
                if (bias) d += bias[h * st[21] + p * st[22]];
                if (softplus) d = SOFTPLUS(d);
            }
            const T xv = x[b * st[3] + h * st[4] + p * st[5]];
            const T dx = d * xv;
            T* restrict s = state + row * st[0] + h * st[1] + p * st[2];
            const T* Ar = A + h * st[12] + p * st[13];
            const int64_t an = st[14];
            T acc = 0;
            if (an == 0) {
                if (p == 0 || dA_varies) dA = EXP(d * Ar[0]);
#pragma omp simd reduction(+ : acc)
                for (int64_t n = 0; n < N; ++n) {
                    const T hn = s[n] * dA + dx * Bn[n];
                    s[n] = hn;
                    acc += Cn[n] * hn;
                }
            } else if (an == 1) {
#pragma omp simd reduction(+ : acc)
                for (int64_t n = 0; n < N; ++n) {
                    const T hn = s[n] * EXP(d * Ar[n]) + dx * Bn[n];
                    s[n] = hn;
                    acc += Cn[n] * hn;
                }
            } else {
#pragma omp simd reduction(+ : acc)
                for (int64_t n = 0; n < N; ++n) {
                    const T hn = s[n] * EXP(d * Ar[n * an]) + dx * Bn[n];
                    s[n] = hn;
                    acc += Cn[n] * hn;
                }
            }
            T y = acc;
            if (D) y += D[h * st[19] + p * st[20]] * xv;
            if (z) {
                const T zv = z[b * st[9] + h * st[10] + p * st[11]];
                y *= zv / ((T)1 + EXP(-zv));
            }
            o[p] = y;
        }
    }
}

/* The intra-chunk matrix of the SSD scan (ops/ssd_scan/README.md, Note [SSD chunked form]) with
 * the time step folded into its columns, for items (chunk, head) in [item_begin, item_end):
 *   M[i, j] = exp(cs_i - cs_j) CB_g[i, j] dt_j   for j <= i in one sequence,   0 elsewhere,
 * g = head / (H / G). One pass writes M: the differences, the mask, the exponential and both
 * products fused. An exponent above the diagonal may overflow; the select discards it.
 * cs (chunks, H, Q) is float64 whatever T is: a chunk's log-decays summed reach thousands at
 * strong decays, where a difference of two float32 sums loses every digit of a decay near 1.
 * dt: (chunks, H, Q) or NULL (no time step folded in: M = decay ∘ CB, as the backward uses it);
 * seg: (chunks, Q) sequence ids of packed sequences or NULL (one sequence);
 * CB: (chunks, G, Q, Q); M: (chunks, H, Q, Q); all contiguous. */
void SSM_FN(ssd_intra)(const double* cs, const T* dt, const int64_t* seg, const T* CB, int64_t H,
                       int64_t G, int64_t Q, int64_t item_begin, int64_t item_end, T* M) {
    const int64_t hg = H / G;
    for (int64_t item = item_begin; item < item_end; ++item) {
        const int64_t c = item / H, h = item % H, g = h / hg;
        const double* restrict ch = cs + item * Q;
        const T* restrict dh = dt ? dt + item * Q : NULL;
        const int64_t* restrict sc = seg ? seg + c * Q : NULL;
        const T* restrict cb = CB + (c * G + g) * Q * Q;
        T* restrict m = M + item * Q * Q;
        for (int64_t i = 0; i < Q; ++i) {
            const double ci = ch[i];
            const T* restrict cbi = cb + i * Q;
            T* restrict mi = m + i * Q;
            if (dh && !sc) {
#pragma omp simd
                for (int64_t j = 0; j < Q; ++j) {
                    const T e = EXP((T)(ci - ch[j])) * cbi[j] * dh[j];
                    mi[j] = j <= i ? e : (T)0;
                }
            } else if (!sc) {
#pragma omp simd
                for (int64_t j = 0; j < Q; ++j) {
                    const T e = EXP((T)(ci - ch[j])) * cbi[j];
                    mi[j] = j <= i ? e : (T)0;
                }
            } else {
                const int64_t si = sc[i];
#pragma omp simd
                for (int64_t j = 0; j < Q; ++j) {
                    const T e = EXP((T)(ci - ch[j])) * cbi[j] * (dh ? dh[j] : (T)1);
                    mi[j] = (j <= i && sc[j] == si) ? e : (T)0;
                }
            }
        }
    }
}

/* The intra-chunk part of the SSD backward (Note [SSD chunked backward], step 5) past its two
 * matmuls, for items (chunk, group) in [item_begin, item_end): from dN = g xᵀ per head, whose
 * columns times dt give dM = g (dt x)ᵀ, the gradient of M = decay ∘ CB,
 *   dCB[i, j] = sum over the group's heads of dM[i, j] decay[i, j]     (0 above the diagonal)
 *   pairs[m]  = sum over i > m, j <= m of dM[i, j] M[i, j]             (per head)
 * the second being what the log-decay increments k in (j, i] receive from M (pairs[m] goes to
 * increment m + 1): each term added once, never as a difference of large sums. decay is
 * recomputed from cs as ssd_intra makes it. Rows are walked from the last: S[j] accumulates
 * sum_{i > m} dM[i, j] M[i, j] and pairs[m] = sum_{j <= m} S[j], both in float64.
 * cs: (chunks, H, Q) float64; dt: (chunks, H, Q); seg: (chunks, Q) or NULL; CB, dCB: (chunks,
 * G, Q, Q); dN: (chunks, H, Q, Q); pairs: (chunks, H, Q); all contiguous. work: Q doubles. */
void SSM_FN(ssd_intra_bwd)(const double* cs, const T* dt, const int64_t* seg, const T* CB,
                           const T* dN, int64_t H, int64_t G, int64_t Q, int64_t item_begin,
                           int64_t item_end, T* dCB, T* pairs, double* work) {
    const int64_t hg = H / G;
    for (int64_t item = item_begin; item < item_end; ++item) {
        const int64_t c = item / G, g = item % G;
        const int64_t* restrict sc = seg ? seg + c * Q : NULL;
        const T* restrict cb = CB + item * Q * Q;
        T* restrict dcb = dCB + item * Q * Q;
        memset(dcb, 0, (size_t)(Q * Q) * sizeof(T));
        for (int64_t h = g * hg; h < (g + 1) * hg; ++h) {
            const double* restrict ch = cs + (c * H + h) * Q;
            const T* restrict dh = dt + (c * H + h) * Q;
            const T* restrict dn = dN + (c * H + h) * Q * Q;
            T* restrict pr = pairs + (c * H + h) * Q;
            double* restrict S = work;
            for (int64_t j = 0; j < Q; ++j) S[j] = 0.0;
            for (int64_t i = Q - 1; i >= 0; --i) {
                /* pairs[i] = sum_{j <= i} S[j], S holding rows i' > i */
                double acc = 0.0;
#pragma omp simd reduction(+ : acc)
                for (int64_t j = 0; j <= i; ++j) acc += S[j];
                pr[i] = (T)acc;
                const double ci = ch[i];
                const T* restrict cbi = cb + i * Q;
                const T* restrict dni = dn + i * Q;
                T* restrict dcbi = dcb + i * Q;
                const int64_t si = sc ? sc[i] : 0;
#pragma omp simd
                for (int64_t j = 0; j < Q; ++j) {
                    const int keep = j <= i && (!sc || sc[j] == si);
                    const T e = keep ? EXP((T)(ci - ch[j])) : (T)0;
                    const T d = dni[j] * dh[j] * e;
                    dcbi[j] += d;
                    S[j] += (double)(d * cbi[j]);
                }
            }
        }
    }
}
