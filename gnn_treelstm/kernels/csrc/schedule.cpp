// The level schedule of a batched forest in one call: what gnn_treelstm/trees/schedule.py
// builds in numpy (LevelSchedule._build), the same arrays element for element, for the data
// loader, where a batch of 25 trees is otherwise some hundred small numpy operations.
//
// Inputs (CPU tensors): n nodes; edges src -> dst (child -> parent, int64, edge id = index);
// the edges' rel and pos (any integer type, pos >= 0); each node's depth (roots 0) and height
// (leaves 0), any integer type; optionally its word id (NO_WORD = no word).
//
// Per direction (up: nodes by height, the edges into a node by child position; down: nodes
// by depth, each node's one edge to its parent) the layout of the module docstring of
// trees/schedule.py: order, rank, node_offsets, edge_offsets, edge_src, edge_dst, edge_seg,
// edge_rel, edge_pos, edge_id, slots, slot_mask (+ up: next_row, next_pos, next_edge,
// edge_start). Orders are stable: nodes of a level by id, edges of a row by (position, id).
// The outputs are slices of one allocation (arena.h).
//
// tests/trees/test_schedule_arrays.py holds the two builds equal on every batch it builds.
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include "arena.h"

namespace {

using at::Tensor;
using gnn_treelstm_native::Arena;

// an integer tensor's values as int64: its own memory when it is contiguous int64, else a
// copy (no dispatched conversion: a batch's depths and heights are int16)
struct Longs {
  std::vector<int64_t> copy;
  const int64_t* data;
  explicit Longs(const Tensor& t) {
    if (t.scalar_type() == at::kLong && t.is_contiguous()) {
      data = t.data_ptr<int64_t>();
      return;
    }
    copy.resize(t.numel());
    AT_DISPATCH_INTEGRAL_TYPES(t.scalar_type(), "level_schedule", [&] {
      const Tensor c = t.contiguous();
      const scalar_t* v = c.data_ptr<scalar_t>();
      for (int64_t i = 0; i < t.numel(); ++i) copy[i] = static_cast<int64_t>(v[i]);
    });
    data = copy.data();
  }
};

// bytes of one direction's outputs (finish's, and sort_levels'): n nodes, e edges, levels,
// slots of width, rel and pos in their types; up also next_row/pos/edge and edge_start
int64_t direction_bytes(int64_t n, int64_t e, int64_t levels, int64_t width,
                        at::ScalarType rel, at::ScalarType pos, bool up) {
  const auto L = at::kLong;
  int64_t b = 2 * Arena::bytes(n, L) + 2 * Arena::bytes(levels + 1, L) + 4 * Arena::bytes(e, L)
              + Arena::bytes(e, rel) + Arena::bytes(e, pos) + Arena::bytes(n * width, L)
              + Arena::bytes(n * width, at::kBool);
  if (up) b += 3 * Arena::bytes(n, L) + Arena::bytes(n + 1, L);
  return b;
}

// the number of levels (top level + 1; 0 for no node), each node's level checked
int64_t count_levels(const int64_t* level, int64_t n) {
  int64_t top = -1;
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(level[i] >= 0 && level[i] < n, "level_schedule: node ", i, " has level ",
                level[i], ", outside 0..", n - 1);
    top = std::max(top, level[i]);
  }
  return top + 1;
}

// values[index] in values' type (rel and pos keep the type they were given in)
Tensor gather(Arena& arena, const Tensor& values, const int64_t* index, int64_t e) {
  Tensor out = arena.take({e}, values.scalar_type());
  AT_DISPATCH_INTEGRAL_TYPES(values.scalar_type(), "level_schedule", [&] {
    const Tensor c = values.contiguous();
    const scalar_t* v = c.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    for (int64_t k = 0; k < e; ++k) o[k] = v[index[k]];
  });
  return out;
}

// out[i] = how many of sorted[0..e) lie below key(i), for i = 0..count-1 (keys ascending):
// numpy's searchsorted of the keys, side "left"
template <class Key>
void lower_bounds(const int64_t* sorted, int64_t e, int64_t count, Key key, int64_t* out) {
  for (int64_t i = 0, k = 0; i < count; ++i) {
    while (k < e && sorted[k] < key(i)) ++k;
    out[i] = k;
  }
}

// order (nodes by level, then id), rank (its inverse) and the level offsets (counting sort)
// of nodes whose levels count_levels checked
void sort_levels(Arena& arena, const int64_t* level, int64_t n, int64_t num_levels,
                 Tensor& order, Tensor& rank, Tensor& offsets) {
  offsets = arena.filled({num_levels + 1}, 0);
  int64_t* off = offsets.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) ++off[level[i] + 1];
  for (int64_t l = 0; l < num_levels; ++l) off[l + 1] += off[l];
  std::vector<int64_t> next(off, off + num_levels);
  order = arena.longs(n);
  rank = arena.longs(n);
  int64_t* o = order.data_ptr<int64_t>();
  int64_t* r = rank.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = next[level[i]]++;
    o[row] = i;
    r[i] = row;
  }
}

// the direction's tensors from its node order and its edges in order: eorder (edge ids),
// e_src / e_dst (rows; e_dst ascending), flat (slot of each sorted edge in the (n, width)
// table)
std::vector<Tensor> finish(Arena& arena, int64_t n, const Tensor& order, const Tensor& rank,
                           const Tensor& node_offsets, const Tensor& eorder,
                           const Tensor& e_src, const Tensor& e_dst, const int64_t* flat,
                           int64_t width, const Tensor& rel, const Tensor& pos,
                           const int64_t* pos_long, bool up) {
  const int64_t e = eorder.size(0);
  const int64_t levels = node_offsets.size(0) - 1;
  const int64_t* off = node_offsets.data_ptr<int64_t>();
  const int64_t* src_r = e_src.data_ptr<int64_t>();
  const int64_t* dst_r = e_dst.data_ptr<int64_t>();
  // the edges into level l: those whose computed row lies in level l's rows
  Tensor edge_offsets = arena.longs(levels + 1);
  int64_t* eoff = edge_offsets.data_ptr<int64_t>();
  lower_bounds(dst_r, e, levels + 1, [off](int64_t l) { return off[l]; }, eoff);
  Tensor edge_seg = arena.longs(e);
  int64_t* seg = edge_seg.data_ptr<int64_t>();
  for (int64_t l = 0; l < levels; ++l)
    for (int64_t k = eoff[l]; k < eoff[l + 1]; ++k) seg[k] = dst_r[k] - off[l];
  Tensor slots = arena.filled({n, width}, n);
  int64_t* sl = slots.data_ptr<int64_t>();
  for (int64_t k = 0; k < e; ++k) sl[flat[k]] = src_r[k];
  Tensor slot_mask = arena.take({n, width}, at::kBool);
  bool* mask = slot_mask.data_ptr<bool>();
  for (int64_t i = 0; i < n * width; ++i) mask[i] = sl[i] != n;
  const int64_t* eid = eorder.data_ptr<int64_t>();
  std::vector<Tensor> out = {order, rank, node_offsets, edge_offsets, e_src, e_dst, edge_seg,
                             gather(arena, rel, eid, e), gather(arena, pos, eid, e), eorder,
                             slots, slot_mask};
  if (up) {  // every row read by one row at most (its parent)
    Tensor next_row = arena.filled({n}, n);
    Tensor next_pos = arena.filled({n}, 0);
    Tensor next_edge = arena.filled({n}, e);
    Tensor edge_start = arena.longs(n + 1);
    int64_t *nr = next_row.data_ptr<int64_t>(), *np_ = next_pos.data_ptr<int64_t>();
    int64_t *ne = next_edge.data_ptr<int64_t>(), *es = edge_start.data_ptr<int64_t>();
    for (int64_t k = 0; k < e; ++k) {
      nr[src_r[k]] = dst_r[k];
      np_[src_r[k]] = pos_long[eid[k]];
      ne[src_r[k]] = k;
    }
    lower_bounds(dst_r, e, n + 1, [](int64_t i) { return i; }, es);  // first edge into each row
    out.insert(out.end(), {next_row, next_pos, next_edge, edge_start});
  }
  return out;
}

// Returns up's 16 tensors, then (top_down) down's 12, then roots, then (a word given)
// word_ids and info = [num_leaf_words, word_rows_contiguous]: every one a slice of one
// allocation (Arena).
std::vector<Tensor> level_schedule(int64_t n, const Tensor& src_in, const Tensor& dst_in,
                                   const Tensor& rel, const Tensor& pos_in,
                                   const Tensor& depth_in, const Tensor& height_in,
                                   const std::optional<Tensor>& word_in, int64_t no_word,
                                   bool top_down) {
  TORCH_CHECK(src_in.device().is_cpu(), "level_schedule: CPU tensors only");
  const int64_t e = src_in.numel();
  TORCH_CHECK(dst_in.numel() == e && rel.numel() == e && pos_in.numel() == e,
              "level_schedule: src, dst, rel and pos differ in length");
  TORCH_CHECK(depth_in.numel() == n && height_in.numel() == n,
              "level_schedule: depth and height need one entry per node");
  TORCH_CHECK(!word_in.has_value() || word_in->numel() == n,
              "level_schedule: word needs one entry per node");
  const Longs src(src_in), dst(dst_in), pos(pos_in), depth(depth_in), height(height_in);
  const int64_t *s = src.data, *d = dst.data, *p = pos.data;
  int64_t width = 1;
  std::vector<char> has_parent(n, 0);
  for (int64_t k = 0; k < e; ++k) {
    TORCH_CHECK(s[k] >= 0 && s[k] < n && d[k] >= 0 && d[k] < n,
                "level_schedule: edge ", k, " names a node outside 0..", n - 1);
    TORCH_CHECK(p[k] >= 0, "level_schedule: edge ", k, " has a negative child position");
    width = std::max(width, p[k] + 1);
    has_parent[s[k]] = 1;
  }
  int64_t num_roots = 0;
  for (int64_t i = 0; i < n; ++i) num_roots += !has_parent[i];
  std::optional<Longs> word;
  int64_t num_words = 0;
  if (word_in.has_value()) {
    word.emplace(*word_in);
    for (int64_t i = 0; i < n; ++i) num_words += word->data[i] != no_word;
  }
  // the outputs' sizes, then one allocation for all of them
  const int64_t up_levels = count_levels(height.data, n);
  const int64_t down_levels = top_down ? count_levels(depth.data, n) : 0;
  const auto rel_t = rel.scalar_type(), pos_t = pos_in.scalar_type();
  int64_t size = direction_bytes(n, e, up_levels, width, rel_t, pos_t, true)
                 + Arena::bytes(num_roots, at::kLong);
  if (top_down) size += direction_bytes(n, e, down_levels, 1, rel_t, pos_t, false);
  if (word) size += Arena::bytes(num_words, at::kLong) + Arena::bytes(2, at::kLong);
  Arena arena(size);

  // up: nodes by height; edges by (row of the parent, child position, edge id)
  Tensor order, rank, offsets;
  sort_levels(arena, height.data, n, up_levels, order, rank, offsets);
  const int64_t* r = rank.data_ptr<int64_t>();
  std::vector<int64_t> start(n + 1, 0);
  for (int64_t k = 0; k < e; ++k) ++start[r[d[k]] + 1];
  for (int64_t i = 0; i < n; ++i) start[i + 1] += start[i];
  Tensor eorder = arena.longs(e);
  int64_t* eo = eorder.data_ptr<int64_t>();
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t k = 0; k < e; ++k) eo[fill[r[d[k]]]++] = k;
  }
  const auto by_pos = [p](int64_t a, int64_t b) { return p[a] < p[b]; };
  for (int64_t i = 0; i < n; ++i) {  // a row's edges by position, ties in edge order
    int64_t* lo = eo + start[i];
    int64_t* hi = eo + start[i + 1];
    if (hi - lo > 32) {
      std::stable_sort(lo, hi, by_pos);
      continue;
    }
    for (int64_t* a = lo + 1; a < hi; ++a)  // insertion sort: stable, no buffer
      for (int64_t* b = a; b > lo && by_pos(b[0], b[-1]); --b) std::swap(b[0], b[-1]);
  }
  Tensor e_src = arena.longs(e), e_dst = arena.longs(e);
  int64_t *es = e_src.data_ptr<int64_t>(), *ed = e_dst.data_ptr<int64_t>();
  std::vector<int64_t> flat(e);
  for (int64_t k = 0; k < e; ++k) {
    es[k] = r[s[eo[k]]];
    ed[k] = r[d[eo[k]]];
    flat[k] = ed[k] * width + p[eo[k]];
  }
  std::vector<Tensor> out = finish(arena, n, order, rank, offsets, eorder, e_src, e_dst,
                                  flat.data(), width, rel, pos_in, p, true);
  const Tensor up_order = order;

  if (top_down) {  // down: nodes by depth; every non-root reads its one parent
    Tensor dorder, drank, doffsets;
    sort_levels(arena, depth.data, n, down_levels, dorder, drank, doffsets);
    const int64_t* dr = drank.data_ptr<int64_t>();
    const int64_t roots = n ? doffsets.data_ptr<int64_t>()[1] : 0;
    TORCH_CHECK(n - roots == e, "level_schedule: ", e, " edges for ", n - roots,
                " non-root nodes (depth > 0): a node with two parents");
    Tensor deorder = arena.longs(e), de_src = arena.longs(e), de_dst = arena.longs(e);
    int64_t *deo = deorder.data_ptr<int64_t>(), *des = de_src.data_ptr<int64_t>();
    int64_t* ded = de_dst.data_ptr<int64_t>();
    for (int64_t k = 0; k < e; ++k) {
      TORCH_CHECK(dr[s[k]] >= roots, "level_schedule: edge ", k, " leaves node ", s[k],
                  " of depth 0 (a root)");
      deo[dr[s[k]] - roots] = k;
    }
    for (int64_t k = 0; k < e; ++k) {
      des[k] = dr[d[deo[k]]];
      ded[k] = roots + k;
    }
    auto down = finish(arena, n, dorder, drank, doffsets, deorder, de_src, de_dst, ded, 1, rel,
                       pos_in, p, false);
    out.insert(out.end(), down.begin(), down.end());
  }

  Tensor roots = arena.longs(num_roots);
  int64_t* root_ids = roots.data_ptr<int64_t>();
  for (int64_t i = 0, j = 0; i < n; ++i)
    if (!has_parent[i]) root_ids[j++] = i;
  out.push_back(roots);

  if (word) {  // nodes with a word, by their up row (leaves first)
    const int64_t* w = word->data;
    const int64_t* o = up_order.data_ptr<int64_t>();
    const int64_t leaf_rows = n ? offsets.data_ptr<int64_t>()[1] : 0;
    Tensor word_ids = arena.longs(num_words);
    int64_t* ids = word_ids.data_ptr<int64_t>();
    int64_t count = 0, leaf_words = 0, last_row = -1;
    for (int64_t row = 0; row < n; ++row) {
      if (w[o[row]] == no_word) continue;
      ids[count++] = o[row];
      leaf_words += row < leaf_rows;
      last_row = row;
    }
    Tensor info = arena.longs(2);
    info.data_ptr<int64_t>()[0] = leaf_words;
    info.data_ptr<int64_t>()[1] = count == 0 || last_row == count - 1;
    out.insert(out.end(), {word_ids, info});
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnn_treelstm, m) {
  m.def(
      "level_schedule(int n, Tensor src, Tensor dst, Tensor rel, Tensor pos, Tensor depth, "
      "Tensor height, Tensor? word, int no_word, bool top_down) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(gnn_treelstm, CPU, m) { m.impl("level_schedule", &level_schedule); }
