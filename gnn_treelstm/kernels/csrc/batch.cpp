// The arrays of a batch of packed trees in one call: what gnn_treelstm/trees/packed.py
// gathers in numpy (batch_arrays: the trees' node and edge ranges, every field taken at
// them, the edges renumbered within the batch), the same arrays element for element.
//
// Inputs (CPU tensors): the packed trees' node_offsets and edge_offsets (int64, one more
// than the stored trees); ids, the stored trees of the batch, in order (int64); the stored
// edges src -> dst (numbered within their tree, any integer type); base, the batch number
// of the first node; node_arrays and edge_arrays, stored fields of any type and shape
// (first dimension: stored nodes, stored edges), each with the type it is read as (a code
// of kTypes; -1: as stored) and an optional map (an integer table: v >= 0 reads as table[v]).
//
// Returns nn, ne (each tree's nodes and edges, int64), src and dst (int64, numbered within
// the batch from base), then every node array's rows of the batch's nodes, then every edge
// array's rows of its edges, each in its shape, read as asked: a tree's rows are contiguous
// in a stored array, so each is one copy a tree where the type stays; then, where label
// names a node array (its index; -1: none), the batch's label order: the nodes whose label
// (as read) is not ignore, in order, then the others (trees/data.py: label_order). The
// outputs are slices of one allocation (arena.h). Every index is checked before it is read
// through: a bad call is a RuntimeError naming the tree or edge.
//
// tests/trees/test_packed.py holds the two builds equal.
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include "arena.h"

namespace {

using at::Tensor;
using gnn_treelstm_native::Arena;

// the types a field may be read as, by their code (gnn_treelstm/kernels/native.py: TYPES)
const at::ScalarType kTypes[] = {at::kLong, at::kInt,  at::kShort, at::kChar,
                                 at::kByte, at::kBool, at::kFloat, at::kDouble};

// in[0..count) as Out, read through table where given (v >= 0 -> table[v], as the packed
// trees' maps read a field; -1 stays -1)
template <class In, class Out>
void convert(const In* in, Out* out, int64_t count, const int64_t* table, int64_t table_size) {
  if (table == nullptr) {
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<Out>(in[i]);
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    const int64_t v = static_cast<int64_t>(in[i]);
    TORCH_CHECK(v < table_size, "gather_trees: value ", v, " outside its map of ", table_size,
                " entries");
    out[i] = static_cast<Out>(v >= 0 ? table[v] : v);
  }
}

// the shape and type of take_rows' output for a stored array
std::vector<int64_t> rows_shape(const Tensor& stored, int64_t rows, const char* what) {
  TORCH_CHECK(stored.dim() >= 1, "gather_trees: a ", what, " array without a first dimension");
  std::vector<int64_t> shape = stored.sizes().vec();
  shape[0] = rows;
  return shape;
}
at::ScalarType rows_type(const Tensor& stored, int64_t code) {
  TORCH_CHECK(code >= -1 && code < 8, "gather_trees: unknown type code ", code);
  return code < 0 ? stored.scalar_type() : kTypes[code];
}

// rows [lo, hi) of every picked tree (ranges[2k], ranges[2k + 1]) of a stored array, in
// order, in one tensor of its trailing shape (a slice of arena), read as type code (-1: the
// stored type) through map (an int64 table, or undefined)
Tensor take_rows(Arena& arena, const Tensor& stored, const std::vector<int64_t>& ranges,
                 int64_t rows, int64_t code, const std::optional<Tensor>& map,
                 const char* what) {
  const Tensor c = stored.contiguous();
  const int64_t have = c.size(0);
  const at::ScalarType type = rows_type(c, code);
  Tensor out = arena.take(rows_shape(c, rows, what), type);
  const int64_t row_items = have ? c.numel() / have : 0;
  for (size_t k = 0; k < ranges.size(); k += 2)
    TORCH_CHECK(ranges[k + 1] <= have, "gather_trees: a ", what, " array has ", have,
                " rows, the packed trees name row ", ranges[k + 1] - 1,
                "; the packed trees are damaged, rebuild them");
  const bool mapped = map.has_value() && map->defined();
  if (type == c.scalar_type() && !mapped) {  // each tree's rows: one copy
    const int64_t row_bytes = row_items * c.element_size();
    const char* from = static_cast<const char*>(c.data_ptr());
    char* to = static_cast<char*>(out.data_ptr());
    for (size_t k = 0; k < ranges.size(); k += 2) {
      const int64_t lo = ranges[k], hi = ranges[k + 1];
      std::memcpy(to, from + lo * row_bytes, (hi - lo) * row_bytes);
      to += (hi - lo) * row_bytes;
    }
    return out;
  }
  Tensor table;
  if (mapped) {
    TORCH_CHECK(!at::isFloatingType(c.scalar_type()), "gather_trees: a map of a float field");
    const bool as_is = map->scalar_type() == at::kLong && map->is_contiguous();
    table = as_is ? *map : map->to(at::kLong).contiguous();
  }
  const int64_t* t = mapped ? table.data_ptr<int64_t>() : nullptr;
  const int64_t t_size = mapped ? table.numel() : 0;
  AT_DISPATCH_ALL_TYPES_AND(at::kBool, c.scalar_type(), "gather_trees", [&] {
    using In = scalar_t;
    const In* from = c.data_ptr<In>();
    AT_DISPATCH_ALL_TYPES_AND(at::kBool, type, "gather_trees", [&] {
      scalar_t* to = out.data_ptr<scalar_t>();
      for (size_t k = 0; k < ranges.size(); k += 2) {
        const int64_t lo = ranges[k] * row_items, count = (ranges[k + 1] - ranges[k]) * row_items;
        convert(from + lo, to, count, t, t_size);
        to += count;
      }
    });
  });
  return out;
}

std::vector<Tensor> gather_trees(const Tensor& node_offsets, const Tensor& edge_offsets,
                                 const Tensor& ids_in, const Tensor& src_in,
                                 const Tensor& dst_in, int64_t base,
                                 at::TensorList node_arrays, at::IntArrayRef node_types,
                                 const c10::List<std::optional<Tensor>>& node_maps,
                                 at::TensorList edge_arrays, at::IntArrayRef edge_types,
                                 const c10::List<std::optional<Tensor>>& edge_maps,
                                 int64_t label, int64_t ignore) {
  TORCH_CHECK(node_offsets.device().is_cpu(), "gather_trees: CPU tensors only");
  TORCH_CHECK(node_offsets.scalar_type() == at::kLong && edge_offsets.scalar_type() == at::kLong
                  && ids_in.scalar_type() == at::kLong,
              "gather_trees: offsets and ids are int64");
  const Tensor no_t = node_offsets.contiguous(), eo_t = edge_offsets.contiguous();
  const Tensor ids_t = ids_in.contiguous();
  const int64_t trees = no_t.numel() - 1, b = ids_t.numel();
  TORCH_CHECK(trees >= 0 && eo_t.numel() == no_t.numel(),
              "gather_trees: node and edge offsets differ in length");
  const int64_t *no = no_t.data_ptr<int64_t>(), *eo = eo_t.data_ptr<int64_t>();
  const int64_t* ids = ids_t.data_ptr<int64_t>();
  std::vector<int64_t> node_ranges(2 * b), edge_ranges(2 * b);
  int64_t n = 0, e = 0;
  for (int64_t k = 0; k < b; ++k) {
    const int64_t t = ids[k];
    TORCH_CHECK(t >= 0 && t < trees, "gather_trees: tree ", t, " out of range for ", trees,
                " stored trees");
    TORCH_CHECK(no[t] >= 0 && no[t] <= no[t + 1] && eo[t] >= 0 && eo[t] <= eo[t + 1],
                "gather_trees: tree ", t, " has decreasing offsets; the packed trees are "
                "damaged, rebuild them");
    node_ranges[2 * k] = no[t];
    node_ranges[2 * k + 1] = no[t + 1];
    edge_ranges[2 * k] = eo[t];
    edge_ranges[2 * k + 1] = eo[t + 1];
    n += no[t + 1] - no[t];
    e += eo[t + 1] - eo[t];
  }
  TORCH_CHECK(src_in.numel() == dst_in.numel(), "gather_trees: src and dst differ in length");
  TORCH_CHECK(node_types.size() == node_arrays.size() && node_maps.size() == node_arrays.size()
                  && edge_types.size() == edge_arrays.size()
                  && edge_maps.size() == edge_arrays.size(),
              "gather_trees: one type and one map an array");
  // every output's size, then one allocation for all of them
  int64_t size = 2 * Arena::bytes(b, at::kLong) + 2 * Arena::bytes(e, at::kLong);
  for (size_t i = 0; i < node_arrays.size(); ++i)
    size += Arena::bytes(c10::multiply_integers(rows_shape(node_arrays[i], n, "node")),
                         rows_type(node_arrays[i], node_types[i]));
  for (size_t i = 0; i < edge_arrays.size(); ++i)
    size += Arena::bytes(c10::multiply_integers(rows_shape(edge_arrays[i], e, "edge")),
                         rows_type(edge_arrays[i], edge_types[i]));
  TORCH_CHECK(label < static_cast<int64_t>(node_arrays.size()),
              "gather_trees: label names node array ", label, " of ", node_arrays.size());
  if (label >= 0) size += Arena::bytes(n, at::kLong);
  Arena arena(size);
  Tensor nn = arena.longs(b), ne = arena.longs(b);
  int64_t *nn_p = nn.data_ptr<int64_t>(), *ne_p = ne.data_ptr<int64_t>();
  for (int64_t k = 0; k < b; ++k) {
    nn_p[k] = node_ranges[2 * k + 1] - node_ranges[2 * k];
    ne_p[k] = edge_ranges[2 * k + 1] - edge_ranges[2 * k];
  }
  Tensor src = arena.longs(e), dst = arena.longs(e);
  {
    const Tensor s_t = src_in.contiguous(), d_t = dst_in.contiguous();
    const int64_t stored = s_t.numel();
    int64_t *s_out = src.data_ptr<int64_t>(), *d_out = dst.data_ptr<int64_t>();
    AT_DISPATCH_INTEGRAL_TYPES(s_t.scalar_type(), "gather_trees", [&] {
      TORCH_CHECK(d_t.scalar_type() == s_t.scalar_type(),
                  "gather_trees: src and dst differ in type");
      const scalar_t *s = s_t.data_ptr<scalar_t>(), *d = d_t.data_ptr<scalar_t>();
      int64_t first = base, j = 0;
      for (int64_t k = 0; k < b; ++k) {
        const int64_t lo = edge_ranges[2 * k], hi = edge_ranges[2 * k + 1], size = nn_p[k];
        TORCH_CHECK(hi <= stored, "gather_trees: the edge arrays have ", stored,
                    " rows, tree ", ids[k], " names row ", hi - 1,
                    "; the packed trees are damaged, rebuild them");
        for (int64_t i = lo; i < hi; ++i, ++j) {
          const int64_t u = s[i], v = d[i];
          TORCH_CHECK(u >= 0 && u < size && v >= 0 && v < size, "gather_trees: an edge of tree ",
                      ids[k], " names node ", (u >= 0 && u < size) ? v : u, " of its ", size,
                      "; the packed trees are damaged, rebuild them");
          s_out[j] = u + first;
          d_out[j] = v + first;
        }
        first += size;
      }
    });
  }
  std::vector<Tensor> out = {nn, ne, src, dst};
  for (size_t i = 0; i < node_arrays.size(); ++i)
    out.push_back(take_rows(arena, node_arrays[i], node_ranges, n, node_types[i],
                            node_maps.get(i), "node"));
  for (size_t i = 0; i < edge_arrays.size(); ++i)
    out.push_back(take_rows(arena, edge_arrays[i], edge_ranges, e, edge_types[i],
                            edge_maps.get(i), "edge"));
  if (label >= 0) {  // the label order: the nodes with a label (!= ignore), then the others
    const Tensor labels = out[4 + label];
    TORCH_CHECK(labels.dim() == 1, "gather_trees: the label array has more than one column");
    Tensor order = arena.longs(n);
    int64_t* o = order.data_ptr<int64_t>();
    AT_DISPATCH_ALL_TYPES_AND(at::kBool, labels.scalar_type(), "gather_trees", [&] {
      const scalar_t* v = labels.data_ptr<scalar_t>();
      int64_t k = 0;
      for (int64_t i = 0; i < n; ++i)
        if (static_cast<int64_t>(v[i]) != ignore) o[k++] = i;
      for (int64_t i = 0; i < n; ++i)
        if (static_cast<int64_t>(v[i]) == ignore) o[k++] = i;
    });
    out.push_back(order);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(gnn_treelstm, m) {
  m.def(
      "gather_trees(Tensor node_offsets, Tensor edge_offsets, Tensor ids, Tensor src, "
      "Tensor dst, int base, Tensor[] node_arrays, int[] node_types, Tensor?[] node_maps, "
      "Tensor[] edge_arrays, int[] edge_types, Tensor?[] edge_maps, int label=-1, "
      "int ignore=-1) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(gnn_treelstm, CPU, m) { m.impl("gather_trees", &gather_trees); }
