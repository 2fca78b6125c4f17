r"""Triton level kernels: the element-wise pass of one level, forward and backward.

Each kernel runs the gate and cell equations of its cell for the nodes of one level
(schedule rows ``a .. a + n - 1``); the level's recurrent matrix product comes before it
as one matrix product (:mod:`.fused_triton` does the bookkeeping), or, in the N-ary
kernels and Child-Sum's with ``FUSE``, inside it (``tl.dot`` over the children's states
forward, over the parent's gate gradients backward). A program covers
``BM`` rows and ``BN`` state columns; every node has one parent, so a node writes its
state into its parent's operand rows (forward) and reads its parent's gradients (backward)
with plain loads and stores, no atomics. The equations:

* :func:`nary_forward` / :func:`nary_backward`: N-ary Tree-LSTM, Tai et al. 2015
  eqs 9-14 (``gnn_treelstm/cells/nary.py``; with ``G = 2`` the cell without output gate,
  ``h_j = tanh(c_j)``), also the sequential LSTM (Tai eq 1 = N-ary with N = 1 on chains):
  ``i, o, f_k = σ(·)``, ``u = tanh(·)``, ``c_j = i ⊙ u + Σ_k f_k ⊙ c_jk`` (eq 13),
  ``h_j = o ⊙ tanh(c_j)`` (eq 14).
* :func:`childsum_forward` / :func:`childsum_backward`: Child-Sum Tree-LSTM, Tai eqs 2-8
  (``gnn_treelstm/cells/childsum.py``): the children's ``U^(i,o,u) h_k`` summed (eq 2 times
  ``U``), ``f_jk = σ(W^(f) x_j + U^(f) h_k + b^(f))`` per child (eq 4),
  ``c_j = i ⊙ u + Σ_k f_jk ⊙ c_k`` (eq 7), ``h_j = o ⊙ tanh(c_j)`` (eq 8); also the
  mTreeLSTM variants (``gnn_treelstm/cells/multiplicative.py``, Tran & Cheng 2018), whose
  ``h~_j`` (eq 4 ``mult``, eq 2 ``full``) is linear in each ``h_k`` for a given relation:
  the kernels read each edge's ``U^(i,o,u)`` share of ``h~_j`` from the level's product
  (``mult``: one block, eq 4 applied per edge before the launch; ``full``: one matrix
  ``V_r`` per relation, ``U^(i,o,u) h~_j = Σ_k V_r(k) h_k``).
* :func:`lex_forward` / :func:`lex_backward`: Teng & Zhang's lexicalized binary
  Tree-LSTM (``gnn_treelstm/cells/lexicalized.py``, eqs 11, 12, 5, 1; the ConTree baseline,
  eqs 5-8) with its head lexicons (eqs 9-10) in the same loop: a node's input term
  ``W_x x_t`` and its share of its parent's head gate ``W_zx^N x_t`` come from the level's
  product, and the child that finishes a parent's children writes the parent's
  ``x_par = z ⊙ x^L + (1 - z) ⊙ x^R`` before the parent's level. The output gate peeps at
  the node's new cell (``W_co c_t``), a product inside the kernel (``tl.dot``, whole rows
  per program).
* :func:`head_forward` / :func:`head_backward`: the head lexicons alone (eqs 9-10), for
  the top-down cell. :func:`topdown_forward` / :func:`topdown_backward`: Teng & Zhang's
  top-down cell (``gnn_treelstm/cells/topdown.py``, eqs 14-15) over the down levels: a
  node writes ``h_t, c_t`` into its children's operand rows in the slot of the child's
  side; the side's peephole ``W_co^N c_t`` is a product inside the kernel.

The backward kernels are the hand-written derivatives of the same equations: with
``δc = dc_j + dh_j ⊙ o ⊙ (1 - tanh²c_j)``, the pre-activation gradients are
``δi = δc ⊙ u ⊙ i(1-i)``, ``δo = dh_j ⊙ tanh c_j ⊙ o(1-o)``, ``δu = δc ⊙ i ⊙ (1-u²)``,
``δf_k = δc ⊙ c_k ⊙ f_k(1-f_k)``, and a child receives ``δc ⊙ f_k`` into its ``dc``.

This module imports triton; :mod:`.fused_triton` imports it only when triton is installed.
On CPU tensors the kernels run under ``TRITON_INTERPRET=1`` (set before Python starts).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["nary_forward", "nary_backward", "childsum_forward", "childsum_backward",
           "lex_forward", "lex_backward", "head_forward", "head_backward", "topdown_forward",
           "topdown_backward"]


@triton.jit
def _sig(x):
    """The logistic function σ."""
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _th(x):
    """tanh, as ``2 σ(2x) - 1``."""
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


# ============================================================== blocks the kernels share
@triton.jit
def _tile(a, n, HS, BM: tl.constexpr, BN: tl.constexpr):
    """A program's tile of the level: rows ``r`` (``BM`` of the level's ``n``), schedule rows
    ``j = a + r``, state columns ``cols`` (``BN`` of ``HS``; all from 0 on a 1-D grid), the
    row mask ``rm`` and the tile mask ``m``."""
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    rm = r < n
    m = rm[:, None] & (cols < HS)[None, :]
    return r, a + r, cols, rm, m


@triton.jit
def _parent(par_ptr, pos_ptr, j, rm, N):
    """Each row's parent row (``N``: a root) and its slot there."""
    return (tl.load(par_ptr + j, mask=rm, other=N),
            tl.load(pos_ptr + j, mask=rm, other=0))


@triton.jit
def _state_out(cj, o_pre, act, st, c_ptr, tc_ptr, h_ptr, m, HS, G: tl.constexpr):
    """``h_j = o ⊙ tanh c_j`` (Tai eqs 8, 14; ``o = σ(o_pre)`` into ``act``'s o block) or,
    with ``G = 2``, ``tanh c_j``; writes ``c``, ``tanh c`` and ``h`` at ``st``; returns
    ``h_j``."""
    t = _th(cj)
    if G == 3:
        o = _sig(o_pre)
        tl.store(act + HS, o, mask=m)
        hj = o * t
    else:
        hj = t
    tl.store(c_ptr + st, cj, mask=m)
    tl.store(tc_ptr + st, t, mask=m)
    tl.store(h_ptr + st, hj, mask=m)
    return hj


@triton.jit
def _iou_grads(dh, dc, act, dg, t, m, HS, G: tl.constexpr):
    """The derivative of :func:`_state_out` and of ``i ⊙ u`` (the activated gates at
    ``act``, ``t = tanh c_j``): ``δc = dc + dh ⊙ o (1 - t²)`` and the pre-activation
    gradients ``δi``, ``δu`` (and ``δo``, ``G = 3``), written into ``dg``'s blocks; returns
    ``δc, δi, δo, δu``."""
    i = tl.load(act, mask=m, other=0.0)
    u = tl.load(act + (G - 1) * HS, mask=m, other=0.0)
    o = tl.load(act + HS, mask=m, other=0.0)
    if G == 3:
        dct = dc + dh * o * (1.0 - t * t)
    else:
        dct = dc + dh * (1.0 - t * t)
    di = dct * u * i * (1.0 - i)
    du = dct * i * (1.0 - u * u)
    do = dh * t * o * (1.0 - o)
    tl.store(dg, di, mask=m)
    tl.store(dg + (G - 1) * HS, du, mask=m)
    if G == 3:
        tl.store(dg + HS, do, mask=m)
    return dct, di, do, du


@triton.jit
def _edge_range(estart_ptr, j, rm):
    """The first child edge of each row and the row's number of children."""
    e0 = tl.load(estart_ptr + j, mask=rm, other=0)
    return e0, tl.load(estart_ptr + j + 1, mask=rm, other=0) - e0


@triton.jit
def _relation_block(row, rel_ptr, e, em, BW, R: tl.constexpr):
    """The block of the edges' relation in their rows (block width ``BW``; the first block
    when ``R = 1``)."""
    if R == 1:
        out = row
    else:
        rel = tl.load(rel_ptr + e, mask=em, other=0)
        out = row + (rel * BW)[:, None]
    return out


@triton.jit
def _times_w(acc, src_ptr, SW, j, rm, w_ptr, ch, HS, T: tl.constexpr, CK: tl.constexpr):
    """``acc + src[j] W`` for the rows ``j`` where ``rm`` (other rows add zeros; row stride
    ``SW``, ``HS`` columns), ``CK`` columns of ``src`` at a time: ``W[k, c]`` at
    ``w_ptr + k HS + c``, or (``T``) ``W^T`` of the matrix there. The Teng & Zhang kernels'
    peephole products; one ``W`` tile live at a time."""
    for k0 in range(0, HS, CK):
        kk = k0 + tl.arange(0, CK)
        s = tl.load(src_ptr + j[:, None] * SW + kk[None, :],
                    mask=rm[:, None] & (kk < HS)[None, :], other=0.0)
        wm = (kk < HS)[:, None] & (ch < HS)[None, :]
        if T:
            w = tl.load(w_ptr + ch[None, :] * HS + kk[:, None], mask=wm, other=0.0)
        else:
            w = tl.load(w_ptr + kk[:, None] * HS + ch[None, :], mask=wm, other=0.0)
        acc += tl.dot(s, w, input_precision="ieee")
    return acc


@triton.jit
def _finisher(slots_ptr, p, j, rm, N):
    """The children rows ``s0``, ``s1`` of each row's parent ``p``, and whether the row is
    the child that finishes them (the larger row)."""
    s0 = tl.load(slots_ptr + p * 2, mask=rm & (p < N), other=N)
    s1 = tl.load(slots_ptr + p * 2 + 1, mask=rm & (p < N), other=N)
    last = tl.maximum(tl.where(s0 < N, s0, -1), tl.where(s1 < N, s1, -1))
    return s0, s1, rm & (p < N) & (last == j)


@triton.jit
def _head_combine(x_ptr, XW, pz_ptr, PZW, bz_ptr, z_ptr, p, s0, s1, fin, N, XS,
                  MODE: tl.constexpr, BX: tl.constexpr):
    """Eqs 9-10 for the parents ``p`` of the finishing rows ``fin``: ``x_par`` (row stride
    ``XW`` of ``x_ptr``) from the children's ``x`` there: ``MODE`` 0 the gate
    ``z = σ(pz[L, :x] + pz[R, x:] + b_z)`` (``pz`` row stride ``PZW``; ``z`` written),
    1 left, 2 right, 3 average. Column by column, ``BX`` columns at a time."""
    for x0 in range(0, XS, BX):
        cx = x0 + tl.arange(0, BX)
        fm = fin[:, None] & (cx < XS)[None, :]
        xl = tl.load(x_ptr + s0[:, None] * XW + cx[None, :], mask=fm & (s0 < N)[:, None],
                     other=0.0)
        xr = tl.load(x_ptr + s1[:, None] * XW + cx[None, :], mask=fm & (s1 < N)[:, None],
                     other=0.0)
        if MODE == 0:
            zp = tl.load(pz_ptr + s0[:, None] * PZW + cx[None, :],
                         mask=fm & (s0 < N)[:, None], other=0.0) + tl.load(
                pz_ptr + s1[:, None] * PZW + XS + cx[None, :],
                mask=fm & (s1 < N)[:, None], other=0.0) + tl.load(
                bz_ptr + cx, mask=cx < XS, other=0.0)[None, :]
            z = _sig(zp)  # eq 10
            tl.store(z_ptr + p[:, None] * XS + cx[None, :], z, mask=fm)
            xp = z * xl + (1.0 - z) * xr  # eq 9
        elif MODE == 1:
            xp = xl
        elif MODE == 2:
            xp = xr
        else:
            xp = 0.5 * (xl + xr)
        tl.store(x_ptr + p[:, None] * XW + cx[None, :], xp, mask=fm)


@triton.jit
def _head_coef(z_ptr, pos_ptr, p, gp, rm, gm, cx, N, XS, MODE: tl.constexpr,
               BM: tl.constexpr):
    """``∂x_gp / ∂x_par`` (eq 9) of each row's parent ``p`` under its parent ``gp`` at the
    columns ``cx``: the gate's ``z_gp`` (left) or ``1 - z_gp`` (right), 1 / 0 by side for
    left and right heads, 1/2 for the average."""
    qp = tl.load(pos_ptr + p, mask=rm & (p < N), other=0)
    if MODE == 0:
        zg = tl.load(z_ptr + gp[:, None] * XS + cx[None, :], mask=gm, other=0.0)
        coef = tl.where((qp == 0)[:, None], zg, 1.0 - zg)
    elif MODE == 1:
        coef = tl.where((qp == 0)[:, None], 1.0, 0.0)
    elif MODE == 2:
        coef = tl.where((qp == 1)[:, None], 1.0, 0.0)
    else:
        coef = tl.full([BM, 1], 0.5, dtype=z_ptr.dtype.element_ty)
    return coef


@triton.jit
def _head_grad(dx_ptr, DXW, dx2_ptr, X2: tl.constexpr, x_ptr, XW, z_ptr, slots_ptr,
               par_ptr, pos_ptr, dxt_ptr, dz_ptr, dzr_ptr, DZW, p, q, j, rm, N, XS,
               MODE: tl.constexpr, BM: tl.constexpr, BX: tl.constexpr):
    """The derivative of :func:`_head_combine` for the rows' parents ``p``: ``δx_par`` =
    ``dx[par]`` (row stride ``DXW``) + the grandparent's ``coef ⊙ dxt[gp]`` (+ ``dx2[par]``
    with ``X2``), written by the finishing child to ``dxt[par]``; with ``MODE`` 0 ``δz_par``
    into ``dz[par]`` (the finishing child) and into the row of ``dzr`` (row stride ``DZW``)
    in the block of the row's side ``q``, zeros in the other. ``BX`` columns at a time."""
    gp = tl.load(par_ptr + p, mask=rm & (p < N), other=N)
    s0, s1, fin = _finisher(slots_ptr, p, j, rm, N)
    for x0 in range(0, XS, BX):
        cx = x0 + tl.arange(0, BX)
        xm = rm[:, None] & (cx < XS)[None, :]
        pmx = xm & (p < N)[:, None]
        gm = pmx & (gp < N)[:, None]
        coef = _head_coef(z_ptr, pos_ptr, p, gp, rm, gm, cx, N, XS, MODE, BM)
        dxp = tl.load(dx_ptr + p[:, None] * DXW + cx[None, :], mask=pmx, other=0.0) \
            + coef * tl.load(dxt_ptr + gp[:, None] * XS + cx[None, :], mask=gm, other=0.0)
        if X2:
            dxp += tl.load(dx2_ptr + p[:, None] * XS + cx[None, :], mask=pmx, other=0.0)
        fm = pmx & fin[:, None]
        tl.store(dxt_ptr + p[:, None] * XS + cx[None, :], dxp, mask=fm)
        if MODE == 0:
            xl = tl.load(x_ptr + s0[:, None] * XW + cx[None, :],
                         mask=pmx & (s0 < N)[:, None], other=0.0)
            xr = tl.load(x_ptr + s1[:, None] * XW + cx[None, :],
                         mask=pmx & (s1 < N)[:, None], other=0.0)
            zp = tl.load(z_ptr + p[:, None] * XS + cx[None, :], mask=pmx, other=0.0)
            dz = dxp * (xl - xr) * zp * (1.0 - zp)  # through eqs 9-10
            tl.store(dz_ptr + p[:, None] * XS + cx[None, :], dz, mask=fm)
            zr = dzr_ptr + j[:, None] * DZW + cx[None, :]
            tl.store(zr + q[:, None] * XS, dz, mask=xm)
            tl.store(zr + (1 - q[:, None]) * XS, tl.zeros([BM, BX], dtype=dz.dtype), mask=xm)


# ============================================================== N-ary (Tai eqs 9-14)
@triton.jit
def _times_ut(src_ptr, rows, rm, u_ptr, blk, cols, kend, HS, KH, BM: tl.constexpr,
              BN: tl.constexpr, CK: tl.constexpr):
    """``src[rows] U_blk^T``: the rows ``rows`` of ``src`` (``KH`` columns; zeros where
    ``rm`` is false) times the rows ``blk HS + cols`` of ``U`` (.., ``KH``) transposed,
    ``CK`` columns at a time, the first ``kend`` of them (0: zeros, no product)."""
    acc = tl.zeros([BM, BN], dtype=src_ptr.dtype.element_ty)
    cm = cols < HS
    for k0 in range(0, kend, CK):
        kk = k0 + tl.arange(0, CK)
        km = kk < KH
        x = tl.load(src_ptr + rows[:, None] * KH + kk[None, :], mask=rm[:, None] & km[None, :],
                    other=0.0)
        ut = tl.load(u_ptr + (blk * HS + cols)[None, :] * KH + kk[:, None],
                     mask=km[:, None] & cm[None, :], other=0.0)
        acc += tl.dot(x, ut, input_precision="ieee")
    return acc


@triton.jit
def _gate_pre(gin_ptr, u_ptr, hk_ptr, j, rm, cols, m, gate, kend, HS, C, KH,
              BM: tl.constexpr, BN: tl.constexpr, CK: tl.constexpr):
    """The pre-activations of gate block ``gate`` (its ``HS`` columns ``cols``) of rows
    ``j``: the input term ``gin[j]`` (``W x_j + b``) plus ``U [h_j1; ...; h_jK]``, the
    children's states ``hk[j]`` (``KH = K HS`` columns) times the block's rows of ``U``
    ((G+K) HS, KH) (:func:`_times_ut`); ``kend`` 0 (a leaf level: no children) skips the
    product."""
    return tl.load(gin_ptr + j[:, None] * C + gate * HS + cols[None, :], mask=m,
                   other=0.0) + _times_ut(hk_ptr, j, rm, u_ptr, gate, cols, kend, HS, KH,
                                          BM, BN, CK)


@triton.jit
def _parent_dh(dg_ptr, u_ptr, p, q0, pr, cols, HS, C, KH, K: tl.constexpr, BM: tl.constexpr,
               BN: tl.constexpr, CK: tl.constexpr):
    """Each row's share of its parent's ``δgates U`` (eqs 9-12 through ``U``): the parent's
    pre-activation gradients ``dg[p]`` (``C`` columns) times ``U``'s columns of the row's
    slot ``q0`` (``U`` ((G+K) HS, KH)), ``CK`` columns of ``dg`` at a time; zeros where
    ``pr`` is false (a root)."""
    out = tl.zeros([BM, BN], dtype=dg_ptr.dtype.element_ty)
    cm = cols < HS
    for q in tl.static_range(K):
        acc = tl.zeros([BM, BN], dtype=dg_ptr.dtype.element_ty)
        for k0 in range(0, C, CK):
            kk = k0 + tl.arange(0, CK)
            km = kk < C
            d = tl.load(dg_ptr + p[:, None] * C + kk[None, :], mask=pr[:, None] & km[None, :],
                        other=0.0)
            u = tl.load(u_ptr + kk[:, None] * KH + q * HS + cols[None, :],
                        mask=km[:, None] & cm[None, :], other=0.0)
            acc += tl.dot(d, u, input_precision="ieee")
        if K == 1:
            out = acc
        else:
            out = tl.where((q0 == q)[:, None], acc, out)
    return out


@triton.jit(do_not_specialize=('a', 'n', 'N', 'kend'))
def nary_forward(gin_ptr, u_ptr, slots_ptr, par_ptr, pos_ptr, act_ptr, c_ptr, tc_ptr, h_ptr,
                 hk_ptr, a, n, N, HS, kend, G: tl.constexpr, K: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, CK: tl.constexpr):
    """Eqs 9-14 for the level's rows: the pre-activations ``W x + b + U [h_j1; ...; h_jK]``
    from ``gin`` (N, (G+K) HS), the input terms, and the level's product inside
    (:func:`_gate_pre`; ``kend`` 0 on the leaf level). Writes the activated gates ``act``
    (row j), ``c``, ``tanh c``, ``h`` and ``h_j`` into the parent's operand row
    ``hk[par_j, pos_j]``."""
    C = (G + K) * HS
    KH = K * HS
    r, j, cols, rm, m = _tile(a, n, HS, BM, BN)
    act = act_ptr + j[:, None] * C + cols[None, :]
    i = _sig(_gate_pre(gin_ptr, u_ptr, hk_ptr, j, rm, cols, m, 0, kend, HS, C, KH, BM, BN,
                   CK))  # eq 9
    tl.store(act, i, mask=m)
    u = _th(_gate_pre(gin_ptr, u_ptr, hk_ptr, j, rm, cols, m, G - 1, kend, HS, C, KH, BM,
                      BN, CK))  # eq 12
    tl.store(act + (G - 1) * HS, u, mask=m)
    cj = i * u
    for q in tl.static_range(K):
        s = tl.load(slots_ptr + j * K + q, mask=rm, other=N)
        f = _sig(_gate_pre(gin_ptr, u_ptr, hk_ptr, j, rm, cols, m, G + q, kend, HS, C, KH,
                           BM, BN, CK))  # eq 10
        tl.store(act + (G + q) * HS, f, mask=m)
        ck = tl.load(c_ptr + s[:, None] * HS + cols[None, :], mask=m & (s < N)[:, None],
                     other=0.0)
        cj += f * ck  # eq 13
    if G == 3:  # eq 11
        o_pre = _gate_pre(gin_ptr, u_ptr, hk_ptr, j, rm, cols, m, 1, kend, HS, C, KH, BM,
                          BN, CK)
    else:
        o_pre = cj  # unread: no output gate
    hj = _state_out(cj, o_pre, act, j[:, None] * HS + cols[None, :], c_ptr, tc_ptr, h_ptr, m,
                    HS, G)  # eq 14
    p, q0 = _parent(par_ptr, pos_ptr, j, rm, N)
    tl.store(hk_ptr + p[:, None] * KH + q0[:, None] * HS + cols[None, :], hj,
             mask=m & (p < N)[:, None])


@triton.jit(do_not_specialize=('a', 'n', 'N'))
def nary_backward(dh_ptr, dc_ptr, act_ptr, c_ptr, tc_ptr, slots_ptr, par_ptr, pos_ptr, u_ptr,
                  dct_ptr, dg_ptr, a, n, N, HS, G: tl.constexpr, K: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, CK: tl.constexpr):
    """The derivative of :func:`nary_forward` for the level's rows: ``dh_j`` = its output
    gradient + its share of the parent's ``δgates_par U`` (:func:`_parent_dh`, the product
    inside), ``dc_j`` = its output gradient + ``δc_par ⊙ f_par,pos_j``. Writes the
    pre-activation gradients ``dg`` (row j, columns as ``act``) and ``δc`` (``dct``)."""
    C = (G + K) * HS
    r, j, cols, rm, m = _tile(a, n, HS, BM, BN)
    p, q0 = _parent(par_ptr, pos_ptr, j, rm, N)
    pm = m & (p < N)[:, None]
    st = j[:, None] * HS + cols[None, :]
    dh = tl.load(dh_ptr + st, mask=m, other=0.0) + _parent_dh(
        dg_ptr, u_ptr, p, q0, rm & (p < N), cols, HS, C, K * HS, K, BM, BN, CK)
    fpar = tl.load(act_ptr + p[:, None] * C + (G + q0[:, None]) * HS + cols[None, :],
                   mask=pm, other=0.0)
    dc = tl.load(dc_ptr + st, mask=m, other=0.0) + tl.load(
        dct_ptr + p[:, None] * HS + cols[None, :], mask=pm, other=0.0) * fpar
    act = act_ptr + j[:, None] * C + cols[None, :]
    dg = dg_ptr + j[:, None] * C + cols[None, :]
    t = tl.load(tc_ptr + st, mask=m, other=0.0)
    dct, di, do, du = _iou_grads(dh, dc, act, dg, t, m, HS, G)
    for q in tl.static_range(K):
        s = tl.load(slots_ptr + j * K + q, mask=rm, other=N)
        ck = tl.load(c_ptr + s[:, None] * HS + cols[None, :], mask=m & (s < N)[:, None],
                     other=0.0)
        f = tl.load(act + (G + q) * HS, mask=m, other=0.0)
        tl.store(dg + (G + q) * HS, dct * ck * f * (1.0 - f), mask=m)
    tl.store(dct_ptr + st, dct, mask=m)


# ============================================================== Child-Sum (Tai eqs 2-8)
@triton.jit(do_not_specialize=('ea', 'a', 'n', 'N', 'E'))
def childsum_forward(wx_ptr, p_ptr, u_ptr, rel_ptr, ea, estart_ptr, esrc_ptr, pe_ptr, act_ptr,
                     c_ptr, tc_ptr, h_ptr, he_ptr, fe_ptr, a, n, N, E, HS, G: tl.constexpr,
                     R: tl.constexpr, FUSE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                     CK: tl.constexpr):
    """Eqs 2-8 for the level's rows from ``wx`` (``W x + b``, (N, (G+1) HS)) and each child
    edge's ``[V_0; ...; V_{R-1}; U^(f)] h_k``: ``V_r h_k`` the edge's contribution to
    ``U^(i,o,u) h~_j`` for relation ``r = rel[e]`` (``V = U^(i,o,u)`` with ``R = 1`` for
    Child-Sum, and for mTreeLSTM with eq 4 applied per edge before the launch; Tran's eq 2
    composed with it per relation for fullTreeLSTM). ``FUSE`` (``R = 1``): computed here,
    the edge's ``h_k`` (``he``) times ``U = [U^(i,o,u); U^(f)]`` ((G+1) HS, HS) at ``u``
    (``tl.dot``); else read from ``p``, the level's edges from edge ``ea``. Writes ``act``
    (i, (o,) u), ``c``, ``tanh c``, ``h``, ``f_jk`` per edge (``fe``) and ``h_j`` into the
    row of its parent edge in ``he``."""
    W = (R * G + 1) * HS
    r, j, cols, rm, m = _tile(a, n, HS, BM, BN)
    e0, deg = _edge_range(estart_ptr, j, rm)
    x = wx_ptr + j[:, None] * ((G + 1) * HS) + cols[None, :]
    pre_i = tl.load(x, mask=m, other=0.0)
    pre_u = tl.load(x + (G - 1) * HS, mask=m, other=0.0)
    pre_o = tl.load(x + HS, mask=m, other=0.0)
    fx = tl.load(x + G * HS, mask=m, other=0.0)
    fc = tl.zeros([BM, BN], dtype=pre_i.dtype)
    for k in range(0, tl.max(deg, 0)):
        em = rm & (k < deg)
        e = e0 + k
        me = m & em[:, None]
        if FUSE:  # eq 2 inside eqs 3, 5, 6; eq 4's U^(f) h_k
            pre_i += _times_ut(he_ptr, e, em, u_ptr, 0, cols, HS, HS, HS, BM, BN, CK)
            pre_u += _times_ut(he_ptr, e, em, u_ptr, G - 1, cols, HS, HS, HS, BM, BN, CK)
            if G == 3:
                pre_o += _times_ut(he_ptr, e, em, u_ptr, 1, cols, HS, HS, HS, BM, BN, CK)
            f = _sig(fx + _times_ut(he_ptr, e, em, u_ptr, G, cols, HS, HS, HS, BM, BN,
                                    CK))  # eq 4
        else:
            pf = p_ptr + (e - ea)[:, None] * W + cols[None, :]
            pr = _relation_block(pf, rel_ptr, e, em, G * HS, R)
            pre_i += tl.load(pr, mask=me, other=0.0)  # U^(i) h~_j, eq 2 inside eq 3
            pre_u += tl.load(pr + (G - 1) * HS, mask=me, other=0.0)
            pre_o += tl.load(pr + HS, mask=me, other=0.0)
            f = _sig(fx + tl.load(pf + R * G * HS, mask=me, other=0.0))  # eq 4
        tl.store(fe_ptr + e[:, None] * HS + cols[None, :], f, mask=me)
        s = tl.load(esrc_ptr + e, mask=em, other=N)
        ck = tl.load(c_ptr + s[:, None] * HS + cols[None, :], mask=me, other=0.0)
        fc += f * ck  # eq 7's sum
    act = act_ptr + j[:, None] * (G * HS) + cols[None, :]
    i = _sig(pre_i)  # eq 3
    u = _th(pre_u)  # eq 6
    tl.store(act, i, mask=m)
    tl.store(act + (G - 1) * HS, u, mask=m)
    # eq 7, eq 5 (o), eq 8
    hj = _state_out(i * u + fc, pre_o, act, j[:, None] * HS + cols[None, :], c_ptr, tc_ptr,
                    h_ptr, m, HS, G)
    pe = tl.load(pe_ptr + j, mask=rm, other=E)
    tl.store(he_ptr + pe[:, None] * HS + cols[None, :], hj, mask=m & (pe < E)[:, None])


@triton.jit(do_not_specialize=('a', 'n', 'N', 'E'))
def childsum_backward(dh_ptr, dc_ptr, act_ptr, c_ptr, tc_ptr, fe_ptr, rel_ptr, estart_ptr,
                      esrc_ptr, par_ptr, pe_ptr, dp_ptr, u_ptr, dct_ptr, dg_ptr, dwf_ptr, d_ptr,
                      a, n, N, E, HS, G: tl.constexpr, R: tl.constexpr, FUSE: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr, CK: tl.constexpr):
    """The derivative of :func:`childsum_forward` for the level's rows: ``dh_j`` = its
    output gradient + the gradient into its ``h`` through its parent edge,
    ``[δiou_par, δf_e] [V_0; ...; V_{R-1}; U^(f)]``: with ``FUSE`` (``R = 1``) computed
    here, the parent edge's row of ``d`` times that matrix ((G + 1) HS, HS) at ``u``
    (``tl.dot``), else read from ``dp`` (the product after the parent's level); ``dc_j``
    = its output gradient + ``δc_par ⊙ f_par,j``. Writes ``δi, (δo,) δu`` (``dg``),
    ``δc`` (``dct``), the node's ``Σ_k δf_jk`` (``dwf``) and per child edge the row of
    ``d``: ``δi, (δo,) δu`` in the block of the edge's relation (``d`` comes zeroed),
    ``δf_jk`` in the last block."""
    W = (R * G + 1) * HS
    r, j, cols, rm, m = _tile(a, n, HS, BM, BN)
    pe = tl.load(pe_ptr + j, mask=rm, other=E)
    p = tl.load(par_ptr + j, mask=rm, other=N)  # the parent's row (N: a root)
    pm = m & (pe < E)[:, None]
    st = j[:, None] * HS + cols[None, :]
    if FUSE:
        dh = tl.load(dh_ptr + st, mask=m, other=0.0) + _parent_dh(
            d_ptr, u_ptr, pe, pe, rm & (pe < E), cols, HS, W, HS, 1, BM, BN, CK)
    else:
        dh = tl.load(dh_ptr + st, mask=m, other=0.0) + tl.load(
            dp_ptr + pe[:, None] * HS + cols[None, :], mask=pm, other=0.0)
    dc = tl.load(dc_ptr + st, mask=m, other=0.0) + tl.load(
        dct_ptr + p[:, None] * HS + cols[None, :], mask=pm, other=0.0) * tl.load(
        fe_ptr + pe[:, None] * HS + cols[None, :], mask=pm, other=0.0)
    act = act_ptr + j[:, None] * (G * HS) + cols[None, :]
    dg = dg_ptr + j[:, None] * (G * HS) + cols[None, :]
    t = tl.load(tc_ptr + st, mask=m, other=0.0)
    dct, di, do, du = _iou_grads(dh, dc, act, dg, t, m, HS, G)
    tl.store(dct_ptr + st, dct, mask=m)
    e0, deg = _edge_range(estart_ptr, j, rm)
    dwf = tl.zeros([BM, BN], dtype=dct.dtype)
    for k in range(0, tl.max(deg, 0)):
        em = rm & (k < deg)
        e = e0 + k
        me = m & em[:, None]
        f = tl.load(fe_ptr + e[:, None] * HS + cols[None, :], mask=me, other=0.0)
        s = tl.load(esrc_ptr + e, mask=em, other=N)
        ck = tl.load(c_ptr + s[:, None] * HS + cols[None, :], mask=me, other=0.0)
        df = dct * ck * f * (1.0 - f)
        dwf += df
        rowf = d_ptr + e[:, None] * W + cols[None, :]
        row = _relation_block(rowf, rel_ptr, e, em, G * HS, R)
        tl.store(row, di, mask=me)
        tl.store(row + (G - 1) * HS, du, mask=me)
        if G == 3:
            tl.store(row + HS, do, mask=me)
        tl.store(rowf + R * G * HS, df, mask=me)
    tl.store(dwf_ptr + st, dwf, mask=m)


# ============================================================== Teng & Zhang lex (eqs 9-12, 5, 1)
@triton.jit(do_not_specialize=('a', 'n', 'N'))
def lex_forward(p_ptr, b_ptr, bz_ptr, wco_ptr, slots_ptr, par_ptr, pos_ptr, op_ptr, act_ptr,
                c_ptr, tc_ptr, h_ptr, z_ptr, a, n, N, HS, XS, MODE: tl.constexpr,
                BM: tl.constexpr, BH: tl.constexpr, BX: tl.constexpr, CK: tl.constexpr):
    """Eqs 11, 12, 5, 1 for the level's rows from ``p`` (N, 5h [+ 2x]): the rows' product
    ``[h^L, h^R, c^L, c^R, x_t] M^T`` (recurrent, peephole and input terms of i, f^L, f^R,
    g, o; with ``MODE`` 0 also ``W_zx^L x_t``, ``W_zx^R x_t``). A program holds whole rows
    (``BH >= h``): the output gate's peephole ``W_co c_t`` on the new cell is a product
    inside the kernel. Writes ``act`` (i, f^L, f^R, g, o), ``c``, ``tanh c``, ``h`` and
    ``h_t, c_t`` into the parent's operand row ``op[par, pos]``. The child that finishes its
    parent's children (the larger row) also writes the parent's head lexicon ``x_par``
    (eqs 9-10; ``MODE`` 0 gate, 1 left, 2 right, 3 average; 4: every ``x_t`` given) into
    ``op[par]`` and its gate ``z`` (MODE 0)."""
    OW = 4 * HS + XS
    PW = 5 * HS + (2 * XS if MODE == 0 else 0)
    r, j, ch, rm, m = _tile(a, n, HS, BM, BH)
    pr = p_ptr + j[:, None] * PW + ch[None, :]
    bb = b_ptr + ch
    i = _sig(tl.load(pr, mask=m, other=0.0) + tl.load(bb, mask=ch < HS, other=0.0)[None, :])
    fl = _sig(tl.load(pr + HS, mask=m, other=0.0)
              + tl.load(bb + HS, mask=ch < HS, other=0.0)[None, :])
    fr = _sig(tl.load(pr + 2 * HS, mask=m, other=0.0)
              + tl.load(bb + 2 * HS, mask=ch < HS, other=0.0)[None, :])
    g = _th(tl.load(pr + 3 * HS, mask=m, other=0.0)
            + tl.load(bb + 3 * HS, mask=ch < HS, other=0.0)[None, :])  # eq 12
    orow = op_ptr + j[:, None] * OW + ch[None, :]
    cl = tl.load(orow + 2 * HS, mask=m, other=0.0)
    cr = tl.load(orow + 3 * HS, mask=m, other=0.0)
    cj = fl * cl + fr * cr + i * g  # eq 5
    st = j[:, None] * HS + ch[None, :]
    ar = act_ptr + j[:, None] * (5 * HS) + ch[None, :]
    tl.store(ar, i, mask=m)  # written before the product: no gate tile lives across it
    tl.store(ar + HS, fl, mask=m)
    tl.store(ar + 2 * HS, fr, mask=m)
    tl.store(ar + 3 * HS, g, mask=m)
    tl.store(tc_ptr + st, _th(cj), mask=m)
    tl.store(c_ptr + st, cj, mask=m)
    tl.debug_barrier()
    acc = _times_w(tl.zeros([BM, BH], dtype=c_ptr.dtype.element_ty), c_ptr, HS, j, rm,
                   wco_ptr, ch, HS, True, CK)  # W_co c_t
    o = _sig(tl.load(pr + 4 * HS, mask=m, other=0.0)
             + tl.load(bb + 4 * HS, mask=ch < HS, other=0.0)[None, :] + acc)  # eq 11 (o)
    cj = tl.load(c_ptr + st, mask=m, other=0.0)
    hj = o * tl.load(tc_ptr + st, mask=m, other=0.0)  # eq 1
    tl.store(ar + 4 * HS, o, mask=m)
    tl.store(h_ptr + st, hj, mask=m)
    p, q = _parent(par_ptr, pos_ptr, j, rm, N)
    pm = m & (p < N)[:, None]
    prow = op_ptr + p[:, None] * OW + ch[None, :]
    tl.store(prow + q[:, None] * HS, hj, mask=pm)
    tl.store(prow + 2 * HS + q[:, None] * HS, cj, mask=pm)
    if MODE < 4:  # the head lexicon of the parent, eqs 9-10
        s0, s1, fin = _finisher(slots_ptr, p, j, rm, N)
        _head_combine(op_ptr + 4 * HS, OW, p_ptr + 5 * HS, PW, bz_ptr, z_ptr, p, s0, s1, fin,
                      N, XS, MODE, BX)


@triton.jit(do_not_specialize=('a', 'n', 'N'))
def lex_backward(dh_ptr, dc_ptr, act_ptr, tc_ptr, op_ptr, z_ptr, wco_ptr, slots_ptr, par_ptr,
                 pos_ptr, dop_ptr, dp_ptr, dct_ptr, dxt_ptr, dz_ptr, dxo_ptr, a, n, N, HS, XS,
                 MODE: tl.constexpr, XO: tl.constexpr, BM: tl.constexpr, BH: tl.constexpr,
                 BX: tl.constexpr, CK: tl.constexpr):
    """The derivative of :func:`lex_forward` for the level's rows: ``dh_t``, ``dc_t`` = the
    output gradients + the parent's ``dop[par, pos]`` (``dp_par M``, the product after the
    parent's level) + ``δc_par ⊙ f^pos_par``. Writes the row's ``dp`` (pre-activation
    gradients of i, f^L, f^R, g, o; with ``MODE`` 0 ``δz_par`` in the block of the row's
    side, zeros in the other) and ``δc`` (``dct``); ``W_co^T δo`` is a product inside the
    kernel. Head lexicons: the gradient of the parent's ``x_par`` is ``dop[par, x]`` + the
    grandparent's ``coef ⊙ dxt[gp]`` (coef: ``z`` / ``1 - z`` by side, or the fixed
    mode's) + with ``XO`` the output gradient of the head lexicons ``dxo[par]``; the
    finishing child writes it to ``dxt[par]`` and ``δz_par`` to ``dz[par]``."""
    OW = 4 * HS + XS
    PW = 5 * HS + (2 * XS if MODE == 0 else 0)
    r, j, ch, rm, m = _tile(a, n, HS, BM, BH)
    p, q = _parent(par_ptr, pos_ptr, j, rm, N)
    pm = m & (p < N)[:, None]
    st = j[:, None] * HS + ch[None, :]
    prow = dop_ptr + p[:, None] * OW + ch[None, :]
    dh = tl.load(dh_ptr + st, mask=m, other=0.0) + tl.load(prow + q[:, None] * HS, mask=pm,
                                                           other=0.0)
    fpar = tl.load(act_ptr + p[:, None] * (5 * HS) + (1 + q[:, None]) * HS + ch[None, :],
                   mask=pm, other=0.0)
    dc = (tl.load(dc_ptr + st, mask=m, other=0.0)
          + tl.load(prow + 2 * HS + q[:, None] * HS, mask=pm, other=0.0)
          + tl.load(dct_ptr + p[:, None] * HS + ch[None, :], mask=pm, other=0.0) * fpar)
    ar = act_ptr + j[:, None] * (5 * HS) + ch[None, :]
    o = tl.load(ar + 4 * HS, mask=m, other=0.0)
    t = tl.load(tc_ptr + st, mask=m, other=0.0)
    dr = dp_ptr + j[:, None] * PW + ch[None, :]
    tl.store(dr + 4 * HS, dh * t * o * (1.0 - o), mask=m)  # δo
    dct = dc + dh * o * (1.0 - t * t)  # the one tile that lives across the product
    tl.debug_barrier()
    dct = _times_w(dct, dp_ptr + 4 * HS, PW, j, rm, wco_ptr, ch, HS, False, CK)  # + W_co^T δo
    tl.store(dct_ptr + st, dct, mask=m)
    i = tl.load(ar, mask=m, other=0.0)
    fl = tl.load(ar + HS, mask=m, other=0.0)
    fr = tl.load(ar + 2 * HS, mask=m, other=0.0)
    g = tl.load(ar + 3 * HS, mask=m, other=0.0)
    orow = op_ptr + j[:, None] * OW + ch[None, :]
    cl = tl.load(orow + 2 * HS, mask=m, other=0.0)
    cr = tl.load(orow + 3 * HS, mask=m, other=0.0)
    tl.store(dr, dct * g * i * (1.0 - i), mask=m)
    tl.store(dr + HS, dct * cl * fl * (1.0 - fl), mask=m)
    tl.store(dr + 2 * HS, dct * cr * fr * (1.0 - fr), mask=m)
    tl.store(dr + 3 * HS, dct * i * (1.0 - g * g), mask=m)
    if MODE < 4:
        _head_grad(dop_ptr + 4 * HS, OW, dxo_ptr, XO, op_ptr + 4 * HS, OW, z_ptr, slots_ptr,
                   par_ptr, pos_ptr, dxt_ptr, dz_ptr, dp_ptr + 5 * HS, PW, p, q, j, rm, N, XS,
                   MODE, BM, BX)


# ============================================================== head lexicons (eqs 9-10)
@triton.jit(do_not_specialize=('a', 'n', 'N'))
def head_forward(pz_ptr, bz_ptr, slots_ptr, par_ptr, x_ptr, z_ptr, a, n, N, XS,
                 MODE: tl.constexpr, BM: tl.constexpr, BX: tl.constexpr):
    """Eqs 9-10 bottom-up: for the level's rows, the child that finishes its parent's
    children (the larger row) writes the parent's head lexicon ``x[par]`` from the
    children's ``x`` (``MODE`` 0 gate with ``z = σ(pz[L, :x] + pz[R, x:] + b_z)``, ``pz``
    the rows' product ``x_t [W_zx^L; W_zx^R]^T``; 1 left, 2 right, 3 average) and ``z``."""
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    rm = r < n
    j = a + r
    p = tl.load(par_ptr + j, mask=rm, other=N)
    s0, s1, fin = _finisher(slots_ptr, p, j, rm, N)
    _head_combine(x_ptr, XS, pz_ptr, 2 * XS, bz_ptr, z_ptr, p, s0, s1, fin, N, XS, MODE, BX)


@triton.jit(do_not_specialize=('a', 'n', 'N'))
def head_backward(dx_ptr, dpx_ptr, x_ptr, z_ptr, slots_ptr, par_ptr, pos_ptr, dxt_ptr, dpz_ptr,
                  dz_ptr, a, n, N, XS, MODE: tl.constexpr, BM: tl.constexpr, BX: tl.constexpr):
    """The derivative of :func:`head_forward` for the level's rows (top-down over the up
    levels): the parent's total ``δx_par`` = its output gradient ``dx[par]`` + ``dpx[par]``
    (``dpz_par [W_zx^L; W_zx^R]``, the product after the parent's level) + the
    grandparent's ``coef ⊙ dxt[gp]`` (coef ``z`` / ``1 - z`` by side, or the fixed mode's),
    written by the finishing child to ``dxt[par]``; with ``MODE`` 0 the row's ``dpz`` holds
    ``δz_par`` in the block of its side (zeros in the other), the finishing child also in
    ``dz[par]``."""
    r = tl.program_id(0) * BM + tl.arange(0, BM)
    rm = r < n
    j = a + r
    p, q = _parent(par_ptr, pos_ptr, j, rm, N)
    _head_grad(dx_ptr, XS, dpx_ptr, MODE == 0, x_ptr, XS, z_ptr, slots_ptr, par_ptr, pos_ptr,
               dxt_ptr, dz_ptr, dpz_ptr, 2 * XS, p, q, j, rm, N, XS, MODE, BM, BX)


# ============================================================== Teng & Zhang top-down (eqs 14-15)
@triton.jit(do_not_specialize=('a', 'n', 'N'))
def topdown_forward(p_ptr, b_ptr, side_ptr, wco_ptr, kids_ptr, op_ptr, act_ptr, c_ptr, tc_ptr,
                    h_ptr, a, n, N, HS, XW, S: tl.constexpr, BM: tl.constexpr, BH: tl.constexpr,
                    CK: tl.constexpr):
    """Eqs 14-15 for the level's rows (down levels) from ``p`` (N, 4h): the rows' product
    ``[h_{t-1} in the slot of the side, c_{t-1} likewise, x_t] M^T`` (i, f, g, o); ``b``
    (S, 4h) by side; the peephole ``W_co^N c_t`` (``wco`` (2, h, h)) a product inside the
    kernel (whole rows per program). Writes ``act`` (i, f, g, o), ``c``, ``tanh c``, ``h``
    and ``h_t, c_t`` into each child's operand row, in the slot of the child's side."""
    PW = 4 * HS
    OW = 4 * HS + XW
    r, j, ch, rm, m = _tile(a, n, HS, BM, BH)
    sd = tl.load(side_ptr + j, mask=rm, other=0)
    pr = p_ptr + j[:, None] * PW + ch[None, :]
    if S == 2:
        bb = b_ptr + (sd * PW)[:, None] + ch[None, :]
    else:
        bb = b_ptr + ch[None, :] + 0 * j[:, None]
    i = _sig(tl.load(pr, mask=m, other=0.0) + tl.load(bb, mask=m, other=0.0))  # eq 15 (i)
    f = _sig(tl.load(pr + HS, mask=m, other=0.0) + tl.load(bb + HS, mask=m, other=0.0))
    g = _th(tl.load(pr + 2 * HS, mask=m, other=0.0)
            + tl.load(bb + 2 * HS, mask=m, other=0.0))  # eq 14 (g)
    orow = op_ptr + j[:, None] * OW + ch[None, :]
    cprev = tl.load(orow + 2 * HS, mask=m, other=0.0) + tl.load(orow + 3 * HS, mask=m,
                                                                 other=0.0)
    cj = f * cprev + i * g  # eq 14 (c)
    st = j[:, None] * HS + ch[None, :]
    ar = act_ptr + j[:, None] * PW + ch[None, :]
    tl.store(ar, i, mask=m)  # written before the product: no gate tile lives across it
    tl.store(ar + HS, f, mask=m)
    tl.store(ar + 2 * HS, g, mask=m)
    tl.store(tc_ptr + st, _th(cj), mask=m)
    tl.store(c_ptr + st, cj, mask=m)
    tl.debug_barrier()
    # W_co^L c_t or W_co^R c_t by side: each row's product with its side's matrix (the
    # other side's rows add zeros), one matrix tile at a time
    peep = _times_w(tl.zeros([BM, BH], dtype=c_ptr.dtype.element_ty), c_ptr, HS, j,
                    rm & (sd == 0), wco_ptr, ch, HS, True, CK)
    peep = _times_w(peep, c_ptr, HS, j, rm & (sd != 0), wco_ptr + HS * HS, ch, HS, True, CK)
    o = _sig(tl.load(pr + 3 * HS, mask=m, other=0.0) + tl.load(bb + 3 * HS, mask=m, other=0.0)
             + peep)  # eq 15 (o)
    cj = tl.load(c_ptr + st, mask=m, other=0.0)
    hj = o * tl.load(tc_ptr + st, mask=m, other=0.0)  # eq 14 (as eq 1)
    tl.store(ar + 3 * HS, o, mask=m)
    tl.store(h_ptr + st, hj, mask=m)
    for q in tl.static_range(2):
        k = tl.load(kids_ptr + j * 2 + q, mask=rm, other=N)
        km = m & (k < N)[:, None]
        krow = op_ptr + k[:, None] * OW + ch[None, :]
        tl.store(krow + q * HS, hj, mask=km)
        tl.store(krow + 2 * HS + q * HS, cj, mask=km)


@triton.jit(do_not_specialize=('a', 'n', 'N'))
def topdown_backward(dh_ptr, dc_ptr, act_ptr, tc_ptr, op_ptr, side_ptr, wco_ptr, kids_ptr,
                     dop_ptr, dp_ptr, dct_ptr, a, n, N, HS, XW, BM: tl.constexpr,
                     BH: tl.constexpr, CK: tl.constexpr):
    """The derivative of :func:`topdown_forward` for the level's rows: ``dh_t``, ``dc_t`` =
    the output gradients + over the children ``k`` (side ``q``) ``dop[k, q]`` (``dp_k M``,
    the product after the child's level) and ``δc_k ⊙ f_k``. Writes the row's ``dp``
    (pre-activation gradients of i, f, g, o) and ``δc`` (``dct``); ``W_co^N^T δo`` is a
    product inside the kernel."""
    PW = 4 * HS
    OW = 4 * HS + XW
    r, j, ch, rm, m = _tile(a, n, HS, BM, BH)
    st = j[:, None] * HS + ch[None, :]
    dh = tl.load(dh_ptr + st, mask=m, other=0.0)
    dc = tl.load(dc_ptr + st, mask=m, other=0.0)
    for q in tl.static_range(2):
        k = tl.load(kids_ptr + j * 2 + q, mask=rm, other=N)
        km = m & (k < N)[:, None]
        krow = dop_ptr + k[:, None] * OW + ch[None, :]
        dh += tl.load(krow + q * HS, mask=km, other=0.0)
        fk = tl.load(act_ptr + k[:, None] * PW + HS + ch[None, :], mask=km, other=0.0)
        dc += tl.load(krow + 2 * HS + q * HS, mask=km, other=0.0) + fk * tl.load(
            dct_ptr + k[:, None] * HS + ch[None, :], mask=km, other=0.0)
    sd = tl.load(side_ptr + j, mask=rm, other=0)
    ar = act_ptr + j[:, None] * PW + ch[None, :]
    o = tl.load(ar + 3 * HS, mask=m, other=0.0)
    t = tl.load(tc_ptr + st, mask=m, other=0.0)
    dr = dp_ptr + j[:, None] * PW + ch[None, :]
    tl.store(dr + 3 * HS, dh * t * o * (1.0 - o), mask=m)  # δo
    dct = dc + dh * o * (1.0 - t * t)  # the one tile that lives across the products
    tl.debug_barrier()
    # + W_co^L^T δo or W_co^R^T δo by side (the other side's rows add zeros)
    dct = _times_w(dct, dp_ptr + 3 * HS, PW, j, rm & (sd == 0), wco_ptr, ch, HS, False, CK)
    dct = _times_w(dct, dp_ptr + 3 * HS, PW, j, rm & (sd != 0), wco_ptr + HS * HS, ch, HS,
                   False, CK)
    tl.store(dct_ptr + st, dct, mask=m)
    i = tl.load(ar, mask=m, other=0.0)
    f = tl.load(ar + HS, mask=m, other=0.0)
    g = tl.load(ar + 2 * HS, mask=m, other=0.0)
    orow = op_ptr + j[:, None] * OW + ch[None, :]
    cprev = tl.load(orow + 2 * HS, mask=m, other=0.0) + tl.load(orow + 3 * HS, mask=m,
                                                                 other=0.0)
    tl.store(dr, dct * g * i * (1.0 - i), mask=m)
    tl.store(dr + HS, dct * cprev * f * (1.0 - f), mask=m)
    tl.store(dr + 2 * HS, dct * i * (1.0 - g * g), mask=m)
