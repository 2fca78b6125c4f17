"""Naive node-by-node references for Tai, Socher & Manning (2015), straight from the paper.

Plain torch, no DGL message passing: the tree is read once from the graph's edge list into
parent/children lists (:func:`tree_of`), then every node is computed recursively from its
children, one matrix-vector product per term of the equation. The weights are the cell's
own, taken by paper name from ``cell.paper_weights()`` (views, so gradients reach the cell).

Cells built with ``output_gate=False`` (Tai's relatedness models; stanfordnlp/treelstm
``gate_output = false``) have no ``W_o, U_o, b_o``: the output equation (eq 8 / eq 14 / the
last line of eq 1) is then ``h = tanh(c)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import dgl
import torch

from gnn_treelstm.trees.graph import NO_WORD, POS, WORD

sigma, tanh = torch.sigmoid, torch.tanh


@dataclass
class Tree:
    """A (batched) forest as plain Python lists."""

    parent: list[int]  # -1 for roots
    children: list[list[int]]  # in child-position order when the graph has edata["pos"]
    position: list[int]  # position among siblings (-1 for roots)
    word: list[int] | None  # ndata["word"] if present


def tree_of(graph: dgl.DGLGraph) -> Tree:
    n = graph.num_nodes()
    src, dst = (t.tolist() for t in graph.edges())
    pos = graph.edata[POS].tolist() if POS in graph.edata else list(range(len(src)))
    parent, position = [-1] * n, [-1] * n
    children: list[list[int]] = [[] for _ in range(n)]
    for s, d, p in zip(src, dst, pos):
        parent[s] = d
        position[s] = p
        children[d].append(s)
    for kids in children:
        kids.sort(key=lambda k: position[k])
    word = graph.ndata[WORD].tolist() if WORD in graph.ndata else None
    return Tree(parent, children, position, word)


def _output(P: dict, pre_o, c: torch.Tensor, gated: bool) -> torch.Tensor:
    """``o ⊙ tanh(c)`` with ``o = σ(pre_o())`` (eqs 5/8, 11/14, 1), or ``tanh(c)`` without
    output gate (then ``P`` must not have output-gate weights)."""
    if not gated:
        assert not any(k.endswith("_o") for k in P), "output_gate=False cell has o weights"
        return tanh(c)
    return sigma(pre_o()) * tanh(c)


def _run(n: int, node_fn) -> tuple[torch.Tensor, torch.Tensor]:
    memo: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def state(j: int) -> tuple[torch.Tensor, torch.Tensor]:
        if j not in memo:
            memo[j] = node_fn(j, state)
        return memo[j]

    out = [state(j) for j in range(n)]
    return torch.stack([h for h, _ in out]), torch.stack([c for _, c in out])


def childsum(cell, graph: dgl.DGLGraph, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tai eqs 2-8, node by node."""
    t = tree_of(graph)
    P = cell.paper_weights()
    gated = cell.output_gate
    zero = x.new_zeros(cell.h_size)

    def node(j, state):
        xj = x[j]
        kids = [state(k) for k in t.children[j]]
        h_tilde = sum((hk for hk, _ in kids), zero)  # eq 2
        i = sigma(P["W_i"] @ xj + P["U_i"] @ h_tilde + P["b_i"])  # eq 3
        f = [sigma(P["W_f"] @ xj + P["U_f"] @ hk + P["b_f"]) for hk, _ in kids]  # eq 4
        u = tanh(P["W_u"] @ xj + P["U_u"] @ h_tilde + P["b_u"])  # eq 6
        c = i * u + sum((fk * ck for fk, (_, ck) in zip(f, kids)), zero)  # eq 7
        # eqs 5, 8 (h = tanh(c) without output gate)
        h = _output(P, lambda: P["W_o"] @ xj + P["U_o"] @ h_tilde + P["b_o"], c, gated)
        return h, c

    return _run(graph.num_nodes(), node)


def nary(cell, graph: dgl.DGLGraph, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tai eqs 9-14, node by node; ``W x_j`` only where the node has a word, children
    indexed by their position (absent positions contribute nothing)."""
    t = tree_of(graph)
    P = cell.paper_weights()
    gated = cell.output_gate
    zero = x.new_zeros(cell.h_size)

    def node(j, state):
        kids = {t.position[k]: state(k) for k in t.children[j]}  # ℓ -> (h_jℓ, c_jℓ)
        has_word = t.word is None or t.word[j] != NO_WORD

        def pre(g, U_list):  # W^(g) x_j + Σ_ℓ U^(g)_ℓ h_jℓ + b^(g)
            s = P[f"b_{g}"] + (P[f"W_{g}"] @ x[j] if has_word else zero)
            for ell, (h_l, _) in kids.items():
                s = s + U_list[ell] @ h_l
            return s

        i = sigma(pre("i", P["U_i"]))  # eq 9
        f = {k: sigma(pre("f", P["U_f"][k])) for k in kids}  # eq 10 (present slots only)
        u = tanh(pre("u", P["U_u"]))  # eq 12
        c = i * u + sum((f[ell] * c_l for ell, (_, c_l) in kids.items()), zero)  # eq 13
        h = _output(P, lambda: pre("o", P["U_o"]), c, gated)  # eqs 11, 14
        return h, c

    return _run(graph.num_nodes(), node)


def _lstm_sequence(P: dict, xs: list[torch.Tensor], h_size: int, gated: bool = True):
    """Tai eq 1 over a list of input vectors; returns lists of h_t, c_t
    (``h_t = tanh(c_t)`` when not ``gated``)."""
    h = c = xs[0].new_zeros(h_size)
    hs, cs = [], []
    for xt in xs:
        i = sigma(P["W_i"] @ xt + P["U_i"] @ h + P["b_i"])
        f = sigma(P["W_f"] @ xt + P["U_f"] @ h + P["b_f"])
        u = tanh(P["W_u"] @ xt + P["U_u"] @ h + P["b_u"])
        c = i * u + f * c
        h = _output(P, lambda h=h, xt=xt: P["W_o"] @ xt + P["U_o"] @ h + P["b_o"], c, gated)
        hs.append(h)
        cs.append(c)
    return hs, cs


def sequences_of(graph: dgl.DGLGraph) -> list[list[int]]:
    """The node ids of every chain in word order (first word = the node without children)."""
    t = tree_of(graph)
    seqs = []
    for start in range(graph.num_nodes()):
        if t.children[start]:
            continue
        seq = [start]
        while t.parent[seq[-1]] != -1:
            seq.append(t.parent[seq[-1]])
        seqs.append(seq)
    return seqs


def sequential(cell, graph: dgl.DGLGraph, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tai eq 1 per sentence, layer by layer; backward direction = the backward weights
    (the same as the forward ones unless untied) on the reversed sentence; output layout as
    :class:`SequentialLSTM` (per direction, the top layer or all layers; forward then
    backward)."""
    n = graph.num_nodes()
    dirs = [False, True] if cell.bidirectional else [False]
    blocks_h, blocks_c = [], []
    for backward in dirs:
        layers = cell.paper_weights("down" if backward else "up")
        per_layer_h = [[None] * n for _ in layers]
        per_layer_c = [[None] * n for _ in layers]
        for seq in sequences_of(graph):
            order = seq[::-1] if backward else seq
            inputs = [x[j] for j in order]
            for li, P in enumerate(layers):
                hs, cs = _lstm_sequence(P, inputs, cell.h_size, cell.output_gate)
                for j, hj, cj in zip(order, hs, cs):
                    per_layer_h[li][j], per_layer_c[li][j] = hj, cj
                inputs = hs  # the next layer reads this layer's h, same direction
        keep = range(len(layers)) if cell.concat_layers else [len(layers) - 1]
        for li in keep:
            blocks_h.append(torch.stack(per_layer_h[li]))
            blocks_c.append(torch.stack(per_layer_c[li]))
    return torch.cat(blocks_h, dim=-1), torch.cat(blocks_c, dim=-1)
