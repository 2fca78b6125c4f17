"""Naive node-by-node reference of Teng & Zhang (2017), straight from the equations.

Plain torch, recursive, one node at a time, no DGL; every paper matrix (``W_hi^L``,
``W_cfl^R``, ...) is sliced by name out of the module's parameters, so the module and the
reference share weights. A tree is given as ``children[v] = {pos: child}`` (pos 0 = left,
1 = right) plus its root; ``x`` has one row per node (only leaves' rows are read).
"""

from __future__ import annotations

import dgl
import torch

import gnn_treelstm  # noqa: F401  (dgl compat before dgl)
from tests.handbuilt import random_batch

Tree = tuple[list[dict[int, int]], int]  # (children by position, root)


def tree_from_graph(g) -> Tree:
    """Children-by-position lists of a single (unbatched) DGL tree."""
    src, dst = (t.tolist() for t in g.edges())
    pos = g.edata["pos"].tolist() if g.num_edges() else []
    children: list[dict[int, int]] = [{} for _ in range(g.num_nodes())]
    for s, d, p in zip(src, dst, pos):
        children[d][p] = s
    root = int(torch.nonzero(g.out_degrees() == 0)[0])
    return children, root


def _blk(m: torch.Tensor, r: int, c: int, h: int, w: int) -> torch.Tensor:
    """Block (r, c) of size h x w of matrix m."""
    return m[r * h:(r + 1) * h, c * w:(c + 1) * w]


def _mv(W: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return W @ v


def heads_reference(tree: Tree, x: torch.Tensor, mode: str, W_z=None, b_z=None):
    """Eqs 9-10: head lexicon per node (dict node -> vector)."""
    children, root = tree
    xs = x.shape[1]
    out: dict[int, torch.Tensor] = {}

    def rec(v: int) -> torch.Tensor:
        kids = children[v]
        if not kids:
            out[v] = x[v]
            return out[v]
        zero = x.new_zeros(xs)
        x_l = rec(kids[0]) if 0 in kids else zero
        x_r = rec(kids[1]) if 1 in kids else zero
        if mode == "gate":
            W_zl, W_zr = W_z[:, :xs], W_z[:, xs:]
            z = torch.sigmoid(_mv(W_zl, x_l) + _mv(W_zr, x_r) + b_z)  # eq 10
            out[v] = z * x_l + (1 - z) * x_r  # eq 9
        elif mode == "left":
            out[v] = x_l
        elif mode == "right":
            out[v] = x_r
        else:
            out[v] = (x_l + x_r) / 2
        return out[v]

    rec(root)
    return out


def lex_reference(cell, tree: Tree, x: torch.Tensor, heads=None):
    """Bottom-up ConTree+Lex (eqs 11, 12, 5, 1) or ConTree (eqs 6, 7, 8, 5, 1).

    Returns ``(h, c)`` dicts node -> vector.
    """
    children, root = tree
    h = cell.h_size
    lex = cell.lexicalized
    if lex and heads is None:
        m = cell.head_lexicon_module
        heads = heads_reference(tree, x, m.mode, getattr(m, "W_z", None),
                                getattr(m, "b_z", None))
    Wx, b, Uh, Uc = cell.W_x, cell.b, cell.U_h, cell.U_c
    if lex:
        W_xi, W_xf, W_xg, W_xo = (Wx[k * h:(k + 1) * h] for k in range(4))
    else:
        W_xi, W_xg, W_xo = (Wx[k * h:(k + 1) * h] for k in range(3))
        W_xf = None
    b_i, b_fl, b_fr, b_g, b_o = (b[k * h:(k + 1) * h] for k in range(5))
    # U_h row blocks i, fl, fr, g, o; column blocks L, R
    W_hi = {N: _blk(Uh, 0, s, h, h) for s, N in enumerate("LR")}
    W_hfl = {N: _blk(Uh, 1, s, h, h) for s, N in enumerate("LR")}
    W_hfr = {N: _blk(Uh, 2, s, h, h) for s, N in enumerate("LR")}
    W_hg = {N: _blk(Uh, 3, s, h, h) for s, N in enumerate("LR")}
    W_ho = {N: _blk(Uh, 4, s, h, h) for s, N in enumerate("LR")}
    W_ci = {N: _blk(Uc, 0, s, h, h) for s, N in enumerate("LR")}
    W_cfl = {N: _blk(Uc, 1, s, h, h) for s, N in enumerate("LR")}
    W_cfr = {N: _blk(Uc, 2, s, h, h) for s, N in enumerate("LR")}
    W_co = cell.W_co
    H: dict[int, torch.Tensor] = {}
    C: dict[int, torch.Tensor] = {}

    def rec(v: int) -> None:
        kids = children[v]
        hN, cN = {}, {}
        for p, N in enumerate("LR"):
            if p in kids:
                rec(kids[p])
                hN[N], cN[N] = H[kids[p]], C[kids[p]]
            else:
                hN[N], cN[N] = x.new_zeros(h), x.new_zeros(h)
        is_leaf = not kids
        if lex:
            xt = heads[v]
        else:
            xt = x[v] if is_leaf else None  # eqs 6-8: no x at internal nodes

        def xterm(W):
            return _mv(W, xt) if (xt is not None and W is not None) else 0.0

        i = torch.sigmoid(xterm(W_xi) + sum(_mv(W_hi[N], hN[N]) + _mv(W_ci[N], cN[N])
                                            for N in "LR") + b_i)
        fl = torch.sigmoid(xterm(W_xf) + sum(_mv(W_hfl[N], hN[N]) + _mv(W_cfl[N], cN[N])
                                             for N in "LR") + b_fl)
        fr = torch.sigmoid(xterm(W_xf) + sum(_mv(W_hfr[N], hN[N]) + _mv(W_cfr[N], cN[N])
                                             for N in "LR") + b_fr)
        g = torch.tanh(xterm(W_xg) + sum(_mv(W_hg[N], hN[N]) for N in "LR") + b_g)
        c = fl * cN["L"] + fr * cN["R"] + i * g  # eq 5
        o = torch.sigmoid(xterm(W_xo) + sum(_mv(W_ho[N], hN[N]) for N in "LR")
                          + _mv(W_co, c) + b_o)
        H[v], C[v] = o * torch.tanh(c), c  # eq 1

    rec(root)
    return H, C


def topdown_reference(cell, tree: Tree, x: torch.Tensor, heads=None):
    """Top-down Tree-LSTM (eqs 14-15, with h_t = o ⊙ tanh(c_t), g from x_t), root seeded
    from its head lexicon with the left parameter set. Returns ``(h, c)`` dicts."""
    children, root = tree
    h = cell.h_size
    if heads is None:
        m = cell.head_lexicon_module
        heads = heads_reference(tree, x, m.mode, getattr(m, "W_z", None),
                                getattr(m, "b_z", None))
    S = cell.W_x.shape[0]

    def params(N: str) -> dict[str, torch.Tensor]:
        s = "LR".index(N)
        Wx, b = cell.W_x[s if S == 2 else 0], cell.b[s if S == 2 else 0]
        P = {f"W_x{gt}": Wx[k * h:(k + 1) * h] for k, gt in enumerate("ifgo")}
        P.update({f"b_{gt}": b[k * h:(k + 1) * h] for k, gt in enumerate("ifgo")})
        P.update({f"W_h{gt}": _blk(cell.U_h, k, s, h, h) for k, gt in enumerate("ifgo")})
        P.update({f"W_c{gt}": _blk(cell.U_c, k, s, h, h) for k, gt in enumerate("if")})
        P["W_co"] = cell.W_co[s]
        return P

    U = {N: params(N) for N in "LR"}
    H: dict[int, torch.Tensor] = {}
    C: dict[int, torch.Tensor] = {}

    def step(v: int, N: str, h_prev: torch.Tensor, c_prev: torch.Tensor) -> None:
        P, xt = U[N], heads[v]
        i = torch.sigmoid(P["W_xi"] @ xt + P["W_hi"] @ h_prev + P["W_ci"] @ c_prev + P["b_i"])
        f = torch.sigmoid(P["W_xf"] @ xt + P["W_hf"] @ h_prev + P["W_cf"] @ c_prev + P["b_f"])
        g = torch.tanh(P["W_xg"] @ xt + P["W_hg"] @ h_prev + P["b_g"])
        c = f * c_prev + i * g
        o = torch.sigmoid(P["W_xo"] @ xt + P["W_ho"] @ h_prev + P["W_co"] @ c + P["b_o"])
        H[v], C[v] = o * torch.tanh(c), c
        for p, kid in children[v].items():
            step(kid, "LR"[p], H[v], C[v])

    step(root, "L", x.new_zeros(h), x.new_zeros(h))
    return H, C


def bitree_reference(cell, tree: Tree, x: torch.Tensor):
    """BiConTree: heads once (bottom-up cell's gate), both directions, eq 16.

    Returns ``(h, c, sentence)``: dicts node -> [up ; down] and the eq-16 vector.
    """
    children, root = tree
    m = cell.up.head_lexicon_module
    heads = heads_reference(tree, x, m.mode, getattr(m, "W_z", None), getattr(m, "b_z", None))
    hu, cu = lex_reference(cell.up, tree, x, heads)
    hd, cd = topdown_reference(cell.down, tree, x, heads)
    H = {v: torch.cat([hu[v], hd[v]]) for v in hu}
    C = {v: torch.cat([cu[v], cd[v]]) for v in cu}
    leaves = [v for v in range(len(children)) if not children[v]]
    mean = torch.stack([hd[v] for v in leaves]).mean(0)
    sentence = torch.cat([hu[root], hd[root], mean])  # eq 16
    return H, C, sentence


def stack(d: dict[int, torch.Tensor], n: int) -> torch.Tensor:
    """Dict node -> vector as an (n, d) tensor in node order."""
    return torch.stack([d[v] for v in range(n)])


# ---------------------------------------------------------------- test helpers
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def binary_batch(seed: int = 0, count: int = 20) -> list[dgl.DGLGraph]:
    return random_batch(seed, count, max_children=2, exact_children=True, words="leaves")


def param_count(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def check_against_reference(cell, graphs, dtype, ref_fn, out_fn=None):
    """Node states and every gradient (params and x) of the batched cell vs the reference
    run tree by tree. ``ref_fn(cell, tree, x) -> (h dict, c dict)``."""
    torch.manual_seed(1)
    cell = cell.to(dtype)
    g = dgl.batch(graphs)
    x = torch.randn(g.num_nodes(), cell.x_size, dtype=dtype, requires_grad=True)
    h, c = cell(g, x)
    rh, rc = torch.randn_like(h), torch.randn_like(c)
    params = list(cell.parameters())
    grads = torch.autograd.grad((h * rh).sum() + (c * rc).sum(), [x, *params])

    x_ref = x.detach().clone().requires_grad_(True)
    loss, off, hs, cs = 0.0, 0, [], []
    for gi in graphs:
        n = gi.num_nodes()
        hd, cd = ref_fn(cell, tree_from_graph(gi), x_ref[off:off + n])
        hs.append(stack(hd, n))
        cs.append(stack(cd, n))
        loss = loss + (hs[-1] * rh[off:off + n]).sum() + (cs[-1] * rc[off:off + n]).sum()
        off += n
    ref_grads = torch.autograd.grad(loss, [x_ref, *params], allow_unused=True)
    tol = TOL[dtype]
    torch.testing.assert_close(h, torch.cat(hs), atol=tol, rtol=tol)
    torch.testing.assert_close(c, torch.cat(cs), atol=tol, rtol=tol)
    names = ["x"] + [n for n, _ in cell.named_parameters()]
    for name, a, b in zip(names, grads, ref_grads):
        b = torch.zeros_like(a) if b is None else b
        torch.testing.assert_close(a, b, atol=tol, rtol=tol, msg=lambda m, n=name: f"{n}: {m}")
