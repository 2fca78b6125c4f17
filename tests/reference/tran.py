"""Naive reference for Tran & Cheng (2018): node by node, recursive, plain torch, no DGL.

Written straight from the equations (Tran eqs 2-4 on top of Tai et al. 2015 eqs 2-8), one
node at a time and one child at a time, reading the weights of a
:class:`gnn_treelstm.cells.multiplicative.MultiplicativeTreeLSTM` (so gradients flow into the
module's own parameters). Gate rows of ``W_x`` / ``W_r`` are ``i, o, u, f``; of ``U_iou``
``i, o, u``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _gates(cell):
    """Split the cell's fused weights into the paper's named matrices."""
    h = cell.h_size
    W = cell.W_x.weight
    b = cell.W_x.bias
    names = ("i", "o", "u", "f")
    Wg = {n: W[k * h:(k + 1) * h] for k, n in enumerate(names)}
    bg = {n: b[k * h:(k + 1) * h] for k, n in enumerate(names)}
    Ug = {n: cell.U_iou.weight[k * h:(k + 1) * h] for k, n in enumerate(("i", "o", "u"))}
    Ug["f"] = cell.U_f.weight
    Wr = None
    if cell.variant == "add":
        Wr = {n: cell.W_r.weight[k * h:(k + 1) * h] for k, n in enumerate(names)}
    return Wg, bg, Ug, Wr


def tran_forward(
    cell,
    parents: Sequence[int],
    rels: Sequence[int],
    x: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """States of every node of a forest given by parent pointers.

    Args:
        cell: a ``MultiplicativeTreeLSTM`` (variant ``mult``, ``add`` or ``full``).
        parents: ``parents[i]`` = parent of node i, ``-1`` for a root (several roots = a
            batch of trees).
        rels: ``rels[i]`` = relation id of the edge ``i -> parents[i]`` (ignored for roots).
        x: (N, x_size) node inputs.

    Returns:
        ``(h, c)``, each (N, h_size), rows in node order.
    """
    n = len(parents)
    children: list[list[int]] = [[] for _ in range(n)]
    for k, p in enumerate(parents):
        if p >= 0:
            children[p].append(k)
    Wg, bg, Ug, Wr = _gates(cell)
    hs: list[torch.Tensor | None] = [None] * n
    cs: list[torch.Tensor | None] = [None] * n
    zero = x.new_zeros(cell.h_size)

    def transition(k: int) -> torch.Tensor:
        """The summand of h~_j for child k (Tran eq 4 / eq 2 / Tai eq 2)."""
        hk, r = hs[k], int(rels[k])
        if cell.variant == "mult":
            e = cell.rel_emb.weight[r]  # e_jk
            m = (cell.W_mr.weight @ e) * (cell.W_mh.weight @ hk)  # eq 4: m_jk
            return cell.W_hm.weight @ m  # eq 4: summand W_hm m_jk
        if cell.variant == "full":
            return cell.W_hh[r] @ hk  # eq 2: W_hh^{r(j,k)} h_k
        return hk  # add: plain child sum

    def visit(j: int) -> None:
        for k in children[j]:
            visit(k)
        xj = x[j]
        if cell.variant == "add":  # node input [x_j ; e_j], e_j = relation to own head
            r = cell.num_relations if parents[j] < 0 else int(rels[j])
            e = cell.rel_emb.weight[r]
            pre = {g: Wg[g] @ xj + Wr[g] @ e + bg[g] for g in Wg}
        else:
            pre = {g: Wg[g] @ xj + bg[g] for g in Wg}
        h_tilde = zero
        for k in children[j]:
            h_tilde = h_tilde + transition(k)
        i = torch.sigmoid(pre["i"] + Ug["i"] @ h_tilde)  # Tai eq 3
        o = torch.sigmoid(pre["o"] + Ug["o"] @ h_tilde)  # Tai eq 5
        u = torch.tanh(pre["u"] + Ug["u"] @ h_tilde)  # Tai eq 6
        c = i * u
        for k in children[j]:
            f = torch.sigmoid(pre["f"] + Ug["f"] @ hs[k])  # Tai eq 4: child's own h_k
            c = c + f * cs[k]  # Tai eq 7
        hs[j] = o * torch.tanh(c)  # Tai eq 8
        cs[j] = c

    for j in range(n):
        if parents[j] < 0:
            visit(j)
    return torch.stack(hs), torch.stack(cs)
