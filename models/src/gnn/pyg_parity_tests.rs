//! PyG parity of the GraphQA encoders' burn layers: `GCNConv`, `GATConv`
//! (4 heads, averaged), `TransformerConv` (4 heads, edge features, root weight) and a 4-layer
//! `TransformerConv` stack with ReLU and mean pooling, against PyG's outputs **and gradients**
//! (inputs, edge features, every parameter) of `sum(out * probe)`, case by case.
//!
//! The cases are `tests/fixtures/gnn_layers` (its README: made with torch 2.15 and
//! torch_geometric 2.8.1 in f64), or the folder `TGRAG_GNN_LAYERS_FIXTURES` names (the same layout:
//! `cases.json` and one `<case>.safetensors` per case), so the same test runs on other sets.
//! Tolerance: 1e-4 of each tensor's largest magnitude (the README's bound for an f32 implementation),
//! and at least 1e-6.
//! The host engine ([`crate::gnn::host`], the hand-written backward the CPU trains GraphQA with)
//! runs the same cases in `pyg_parity_host_layers_outputs_and_gradients`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::module::Param;
use burn::tensor::{Device, Gradients, Tensor, TensorData};

use super::{GatLayer, GcnLayer, GraphEncoder, TransformerLayer};
use crate::gnn::batch::{GraphBatch, SmallGraph};
use crate::gnn::encoders::{EncoderKind, EncoderShape, Pooling};
use crate::train::{Dense, floats};

/// One case: float tensors (shape, values) and the integer ones.
struct Case {
    name: String,
    floats: BTreeMap<String, (Vec<usize>, Vec<f64>)>,
    ints: BTreeMap<String, (Vec<usize>, Vec<i64>)>,
}

impl Case {
    fn read(path: &Path) -> Case {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (mut floats, mut ints) = (BTreeMap::new(), BTreeMap::new());
        for (name, view) in st.tensors() {
            let shape = view.shape().to_vec();
            let data = view.data();
            match view.dtype() {
                safetensors::Dtype::F64 => {
                    let v = data.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
                    floats.insert(name.to_string(), (shape, v));
                }
                safetensors::Dtype::I64 => {
                    let v = data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
                    ints.insert(name.to_string(), (shape, v));
                }
                other => panic!("{}: {name} is {other:?}", path.display()),
            }
        }
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
        Case { name, floats, ints }
    }

    fn f(&self, name: &str) -> &(Vec<usize>, Vec<f64>) {
        self.floats.get(name).unwrap_or_else(|| panic!("{}: no tensor {name}", self.name))
    }

    fn f32s(&self, name: &str) -> Vec<f32> {
        self.f(name).1.iter().map(|&v| v as f32).collect()
    }

    /// A PyG `Linear` weight `[out, in]` as ours `[in, out]`, f32.
    fn weight_t(&self, name: &str) -> (Vec<f32>, usize, usize) {
        let (shape, v) = self.f(name);
        let (o, i) = (shape[0], shape[1]);
        let mut t = vec![0f32; o * i];
        for r in 0..o {
            for c in 0..i {
                t[c * o + r] = v[r * i + c] as f32;
            }
        }
        (t, i, o)
    }

    /// A `Dense` from PyG's `<prefix>.weight` and `<prefix>.bias` (zero where PyG has none).
    fn dense(&self, prefix: &str, dev: &Device) -> Dense {
        let (w, i, o) = self.weight_t(&format!("param.{prefix}.weight"));
        let bias = format!("param.{prefix}.bias");
        let b = if self.floats.contains_key(&bias) { self.f32s(&bias) } else { vec![0.0; o] };
        Dense::from_host(w, b, i, o, dev)
    }

    /// The batch: every graph's nodes (contiguous, as PyG's block-diagonal batches are), its local
    /// edges in the file's order, node and edge features.
    fn batch(&self, dev: &Device) -> GraphBatch {
        let (xs, x) = self.f("x");
        let d = xs[1];
        let graph = &self.ints["graph"].1;
        let (ei_shape, ei) = &self.ints["edge_index"];
        let m = ei_shape[1];
        let edge = self.floats.get("edge_attr");
        let de = edge.map_or(1, |(s, _)| s[1]);
        let n_graphs = graph.iter().max().map_or(0, |&g| g as usize + 1);
        let start = |g: usize| graph.iter().position(|&x| x as usize == g).expect("every graph has a node");
        let owned: Vec<OwnedGraph> = (0..n_graphs)
            .map(|g| {
                let (s0, n) = (start(g), graph.iter().filter(|&&x| x as usize == g).count());
                let xg: Vec<f32> = x[s0 * d..(s0 + n) * d].iter().map(|&v| v as f32).collect();
                let (mut edges, mut ex) = (Vec::new(), Vec::new());
                for e in 0..m {
                    let (s, t) = (ei[e] as usize, ei[m + e] as usize);
                    if graph[t] as usize == g {
                        assert_eq!(graph[s], graph[t], "{}: edge {e} joins two graphs", self.name);
                        edges.push(((s - s0) as u32, (t - s0) as u32));
                        match edge {
                            Some((_, v)) => ex.extend(v[e * de..(e + 1) * de].iter().map(|&v| v as f32)),
                            None => ex.push(0.0),
                        }
                    }
                }
                (xg, n, edges, ex)
            })
            .collect();
        let graphs: Vec<SmallGraph<'_>> = owned.iter().map(|(x, n, edges, ex)| SmallGraph { x, n: *n, edges, edge_x: ex }).collect();
        let mut b = GraphBatch::new(&graphs, d, de, dev).expect("batch");
        b.x = b.x.require_grad();
        if edge.is_some() {
            b.edge_x = b.edge_x.require_grad();
        }
        b
    }
}

/// One graph of a case: node features, node count, local edges, edge features.
type OwnedGraph = (Vec<f32>, usize, Vec<(u32, u32)>, Vec<f32>);

/// Every case file of the set: `TGRAG_GNN_LAYERS_FIXTURES`, else the committed fixture.
fn cases() -> Vec<PathBuf> {
    let dir = std::env::var_os("TGRAG_GNN_LAYERS_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gnn_layers"));
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("cases.json")).unwrap_or_else(|e| panic!("{}/cases.json: {e}", dir.display())))
            .expect("cases.json");
    let names: Vec<PathBuf> = index["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| dir.join(format!("{}.safetensors", c["name"].as_str().expect("name"))))
        .collect();
    assert!(!names.is_empty(), "{}: no cases", dir.display());
    names
}

/// `got` (f32) against PyG's f64 `want`: within 1e-4 of the largest |want|.
fn close(case: &str, what: &str, got: Tensor<2>, want: &(Vec<usize>, Vec<f64>)) {
    assert_eq!(got.dims().iter().product::<usize>(), want.1.len(), "{case} {what}: shape {:?} vs {:?}", got.dims(), want.0);
    close_host(case, what, &floats(got).expect("floats"), want);
}

/// [`close`] for host values.
fn close_host(case: &str, what: &str, got: &[f32], want: &(Vec<usize>, Vec<f64>)) {
    assert_eq!(got.len(), want.1.len(), "{case} {what}: {} values vs shape {:?}", got.len(), want.0);
    // A tensor PyG computes as exactly zero (the key bias's gradient: a shift of every key of a
    // target leaves its softmax unchanged) is held to 1e-6, the f32 rounding of its terms.
    let scale = want.1.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-2);
    let worst = got.iter().zip(&want.1).map(|(g, w)| (f64::from(*g) - w).abs()).fold(0f64, f64::max);
    assert!(worst <= 1e-4 * scale, "{case} {what}: max |diff| {worst:.3e} against max |value| {scale:.3e}");
}

/// A gradient as `[rows, cols]` (1-d and 3-d parameters flattened to one row).
fn grad_of<const D: usize>(t: &Tensor<D>, grads: &Gradients, what: &str) -> Tensor<2> {
    let g = t.grad(grads).unwrap_or_else(|| panic!("no gradient for {what}"));
    let n = g.dims().iter().product::<usize>();
    g.reshape([1, n])
}

/// A Dense's weight gradient as PyG's `[out, in]`, and its bias gradient.
fn dense_grads(case: &Case, layer: &Dense, prefix: &str, grads: &Gradients) {
    let (w, b) = layer.params();
    let gw = w.grad(grads).unwrap_or_else(|| panic!("{}: no gradient for {prefix}.weight", case.name)).transpose();
    close(&case.name, &format!("grad.{prefix}.weight"), gw, case.f(&format!("grad.{prefix}.weight")));
    let bias = format!("grad.{prefix}.bias");
    if case.floats.contains_key(&bias) {
        close(&case.name, &bias, grad_of(&b, grads, &bias), case.f(&bias));
    }
}

fn param2(case: &Case, name: &str, rows: usize, dev: &Device) -> Param<Tensor<2>> {
    let v = case.f32s(name);
    let cols = v.len() / rows;
    Param::from_data(TensorData::new(v, [rows, cols]), dev)
}

fn transformer(case: &Case, prefix: &str, heads: usize, dev: &Device) -> TransformerLayer {
    TransformerLayer {
        q: case.dense(&format!("{prefix}.lin_query"), dev),
        k: case.dense(&format!("{prefix}.lin_key"), dev),
        v: case.dense(&format!("{prefix}.lin_value"), dev),
        e: case.dense(&format!("{prefix}.lin_edge"), dev),
        skip: case.dense(&format!("{prefix}.lin_skip"), dev),
        heads,
    }
}

fn transformer_grads(case: &Case, t: &TransformerLayer, prefix: &str, grads: &Gradients) {
    for (d, name) in [(&t.q, "lin_query"), (&t.k, "lin_key"), (&t.v, "lin_value"), (&t.e, "lin_edge"), (&t.skip, "lin_skip")] {
        dense_grads(case, d, &format!("{prefix}.{name}"), grads);
    }
}

#[test]
fn pyg_parity_burn_layers_outputs_and_gradients() {
    let dev = Device::flex().autodiff();
    let heads = 4;
    let mut seen = BTreeMap::<String, usize>::new();
    for path in cases() {
        let case = Case::read(&path);
        let g = case.batch(&dev);
        let probe = case.f("probe");
        let kind = case.name.split('_').next().unwrap_or("").to_string();
        let grads = match kind.as_str() {
            "gcn" => {
                // PyG's GCNConv: `lin` without bias, then `bias` after aggregation (our Dense's bias).
                let (w, i, o) = case.weight_t("param.layer.lin.weight");
                let layer = GcnLayer { lin: Dense::from_host(w, case.f32s("param.layer.bias"), i, o, &dev) };
                let out = layer.forward(g.x.clone(), &g);
                close(&case.name, "out", out.clone(), case.f("out"));
                let grads = loss(&out, probe, &dev).backward();
                let (w, b) = layer.lin.params();
                close(&case.name, "grad.layer.lin.weight", w.grad(&grads).expect("w").transpose(), case.f("grad.layer.lin.weight"));
                close(&case.name, "grad.layer.bias", grad_of(&b, &grads, "bias"), case.f("grad.layer.bias"));
                grads
            }
            "gat" => {
                let (w, i, o) = case.weight_t("param.layer.lin.weight");
                let layer = GatLayer {
                    lin: Dense::from_host(w, vec![0.0; o], i, o, &dev),
                    att_src: param2(&case, "param.layer.att_src", heads, &dev),
                    att_dst: param2(&case, "param.layer.att_dst", heads, &dev),
                    bias: Param::from_data(TensorData::new(case.f32s("param.layer.bias"), [o / heads]), &dev),
                    heads,
                };
                let out = layer.forward(g.x.clone(), &g);
                close(&case.name, "out", out.clone(), case.f("out"));
                let grads = loss(&out, probe, &dev).backward();
                let (lw, _) = layer.lin.params();
                close(&case.name, "grad.layer.lin.weight", lw.grad(&grads).expect("w").transpose(), case.f("grad.layer.lin.weight"));
                for (p, name) in [(&layer.att_src, "att_src"), (&layer.att_dst, "att_dst")] {
                    close(&case.name, name, grad_of(&p.val(), &grads, name), case.f(&format!("grad.layer.{name}")));
                }
                close(&case.name, "grad.layer.bias", grad_of(&layer.bias.val(), &grads, "bias"), case.f("grad.layer.bias"));
                grads
            }
            "transformer" => {
                let layer = transformer(&case, "layer", heads, &dev);
                let out = layer.forward(g.x.clone(), g.edge_x.clone(), &g);
                close(&case.name, "out", out.clone(), case.f("out"));
                let grads = loss(&out, probe, &dev).backward();
                transformer_grads(&case, &layer, "layer", &grads);
                close(&case.name, "grad.edge_attr", g.edge_x.grad(&grads).expect("edge grad"), case.f("grad.edge_attr"));
                grads
            }
            "gt" => {
                // Four TransformerConv layers, ReLU between (no batch norm in this case), mean pooling.
                let layers: Vec<TransformerLayer> = (0..4).map(|l| transformer(&case, &format!("layers.{l}"), heads, &dev)).collect();
                let mut h = g.x.clone();
                for (l, layer) in layers.iter().enumerate() {
                    h = layer.forward(h, g.edge_x.clone(), &g);
                    if l + 1 < layers.len() {
                        h = burn::tensor::activation::relu(h);
                    }
                }
                let shape =
                    EncoderShape { kind: EncoderKind::Gt, in_dim: 16, edge_dim: 16, hidden: 32, layers: 4, heads, pooling: Pooling::Mean };
                let pooled = GraphEncoder::new(shape, 0, &dev).expect("encoder").pool(h, &g);
                close(&case.name, "out", pooled.clone(), case.f("out"));
                let grads = loss(&pooled, probe, &dev).backward();
                for (l, layer) in layers.iter().enumerate() {
                    transformer_grads(&case, layer, &format!("layers.{l}"), &grads);
                }
                close(&case.name, "grad.edge_attr", g.edge_x.grad(&grads).expect("edge grad"), case.f("grad.edge_attr"));
                grads
            }
            other => panic!("{}: unknown layer kind {other}", case.name),
        };
        close(&case.name, "grad.x", g.x.grad(&grads).expect("x grad"), case.f("grad.x"));
        *seen.entry(if kind == "gt" { "stack".to_string() } else { kind }).or_default() += 1;
    }
    eprintln!("pyg_parity (burn): {seen:?}");
    if std::env::var_os("TGRAG_GNN_LAYERS_FIXTURES").is_none() {
        assert_eq!(seen.len(), 4, "the committed set has every kind: {seen:?}");
    }
}

/// `sum(out * probe)`, the scalar whose gradients the fixture holds.
fn loss(out: &Tensor<2>, probe: &(Vec<usize>, Vec<f64>), dev: &Device) -> Tensor<1> {
    let p: Vec<f32> = probe.1.iter().map(|&v| v as f32).collect();
    let p = Tensor::<2>::from_data(TensorData::new(p, [probe.0[0], probe.0[1]]), dev);
    (out.clone() * p).sum()
}

mod host {
    //! The same cases through the host engine's layers.

    use super::*;
    use crate::gnn::host::{EdgeIn, Gat, Gcn, HostBatch, Lin, P, Transformer, mean_pool, mean_pool_back, relu, relu_back};

    impl Case {
        /// The case's batch on the host (every edge's features its own row).
        fn host_batch(&self) -> HostBatch {
            let b = self.batch(&Device::flex().autodiff());
            let x = floats(b.x.clone()).expect("x");
            let ex = floats(b.edge_x.clone()).expect("edge x");
            // Rebuild the graphs from the burn batch's host copies.
            let (d, de) = (b.dim, b.edge_dim);
            let owned: Vec<OwnedGraph> = (0..b.n_graphs)
                .map(|g| {
                    let (o, n) = (b.offsets[g], b.counts[g]);
                    let (mut edges, mut e_x) = (Vec::new(), Vec::new());
                    for e in 0..b.n_edges {
                        if b.node_graph_h[b.dst_h[e] as usize] as usize == g {
                            edges.push((b.src_h[e] - o as u32, b.dst_h[e] - o as u32));
                            e_x.extend_from_slice(&ex[e * de..(e + 1) * de]);
                        }
                    }
                    (x[o * d..(o + n) * d].to_vec(), n, edges, e_x)
                })
                .collect();
            let graphs: Vec<SmallGraph<'_>> = owned.iter().map(|(x, n, e, ex)| SmallGraph { x, n: *n, edges: e, edge_x: ex }).collect();
            HostBatch::new(&graphs, d, de, false).expect("host batch")
        }

        fn lin(&self, prefix: &str) -> Lin {
            let (w, i, o) = self.weight_t(&format!("param.{prefix}.weight"));
            let bias = format!("param.{prefix}.bias");
            let b = if self.floats.contains_key(&bias) { self.f32s(&bias) } else { vec![0.0; o] };
            Lin::new(w, b, i, o).expect("lin")
        }

        fn host_transformer(&self, prefix: &str, heads: usize) -> Transformer {
            let l = |n: &str| self.lin(&format!("{prefix}.{n}"));
            Transformer { q: l("lin_query"), k: l("lin_key"), v: l("lin_value"), e: l("lin_edge"), skip: l("lin_skip"), heads }
        }
    }

    /// A host weight gradient `[in, out]` as PyG's `[out, in]`.
    fn transposed(g: &[f32], i: usize, o: usize) -> Vec<f32> {
        let mut t = vec![0f32; g.len()];
        for r in 0..i {
            for c in 0..o {
                t[c * i + r] = g[r * o + c];
            }
        }
        t
    }

    fn lin_grads(case: &Case, l: &Lin, prefix: &str) {
        close_host(
            &case.name,
            &format!("grad.{prefix}.weight"),
            &transposed(&l.w.g, l.din, l.dout),
            case.f(&format!("grad.{prefix}.weight")),
        );
        let bias = format!("grad.{prefix}.bias");
        if case.floats.contains_key(&bias) {
            close_host(&case.name, &bias, &l.b.g, case.f(&bias));
        }
    }

    fn transformer_grads(case: &Case, t: &Transformer, prefix: &str) {
        for (d, name) in [(&t.q, "lin_query"), (&t.k, "lin_key"), (&t.v, "lin_value"), (&t.e, "lin_edge"), (&t.skip, "lin_skip")] {
            lin_grads(case, d, &format!("{prefix}.{name}"));
        }
    }

    #[test]
    fn pyg_parity_host_layers_outputs_and_gradients() {
        let heads = 4;
        let mut seen = BTreeMap::<String, usize>::new();
        for path in cases() {
            let case = Case::read(&path);
            let b = case.host_batch();
            let probe = case.f32s("probe");
            let kind = case.name.split('_').next().unwrap_or("").to_string();
            let edge = EdgeIn::Rows { rows: &b.edge_rows, n_rows: b.n_rows, row: &b.edge_row };
            let mut dx = vec![0f32; b.x.len()];
            let mut dedge = vec![0f32; b.edge_rows.len()];
            match kind.as_str() {
                "gcn" => {
                    let (w, i, o) = case.weight_t("param.layer.lin.weight");
                    let mut layer = Gcn { lin: Lin::new(w, case.f32s("param.layer.bias"), i, o).expect("lin") };
                    let (out, cache) = layer.forward(&b.x, &b).expect("forward");
                    close_host(&case.name, "out", &out, case.f("out"));
                    layer.backward(&cache, &probe, &b, Some(&mut dx)).expect("backward");
                    close_host(&case.name, "grad.layer.lin.weight", &transposed(&layer.lin.w.g, i, o), case.f("grad.layer.lin.weight"));
                    close_host(&case.name, "grad.layer.bias", &layer.lin.b.g, case.f("grad.layer.bias"));
                }
                "gat" => {
                    let (w, i, o) = case.weight_t("param.layer.lin.weight");
                    let mut layer = Gat {
                        lin: Lin::new(w, vec![0.0; o], i, o).expect("lin"),
                        att_src: P::new(case.f32s("param.layer.att_src")),
                        att_dst: P::new(case.f32s("param.layer.att_dst")),
                        bias: P::new(case.f32s("param.layer.bias")),
                        heads,
                    };
                    let (out, cache) = layer.forward(&b.x, &b).expect("forward");
                    close_host(&case.name, "out", &out, case.f("out"));
                    layer.backward(&cache, &probe, &b, Some(&mut dx)).expect("backward");
                    close_host(&case.name, "grad.layer.lin.weight", &transposed(&layer.lin.w.g, i, o), case.f("grad.layer.lin.weight"));
                    close_host(&case.name, "att_src", &layer.att_src.g, case.f("grad.layer.att_src"));
                    close_host(&case.name, "att_dst", &layer.att_dst.g, case.f("grad.layer.att_dst"));
                    close_host(&case.name, "grad.layer.bias", &layer.bias.g, case.f("grad.layer.bias"));
                }
                "transformer" => {
                    let mut layer = case.host_transformer("layer", heads);
                    let (out, cache) = layer.forward(&b.x, edge, &b).expect("forward");
                    close_host(&case.name, "out", &out, case.f("out"));
                    layer.backward(&cache, &probe, edge, &b, Some(&mut dx), Some(&mut dedge)).expect("backward");
                    transformer_grads(&case, &layer, "layer");
                    close_host(&case.name, "grad.edge_attr", &dedge, case.f("grad.edge_attr"));
                }
                "gt" => {
                    // Four TransformerConv layers, ReLU between (no batch norm), mean pooling.
                    let mut layers: Vec<Transformer> = (0..4).map(|l| case.host_transformer(&format!("layers.{l}"), heads)).collect();
                    let (mut h, mut caches, mut outs) = (b.x.clone(), Vec::new(), Vec::new());
                    for (l, layer) in layers.iter().enumerate() {
                        let (mut y, c) = layer.forward(&h, edge, &b).expect("forward");
                        if l + 1 < 4 {
                            relu(&mut y);
                            outs.push(y.clone());
                        }
                        caches.push(c);
                        h = y;
                    }
                    let f = layers[3].q.dout;
                    close_host(&case.name, "out", &mean_pool(&h, f, &b), case.f("out"));
                    let mut dh = mean_pool_back(&probe, f, &b);
                    for l in (0..4).rev() {
                        if l + 1 < 4 {
                            relu_back(&outs[l], &mut dh);
                        }
                        let mut d = vec![0f32; b.n * layers[l].q.din];
                        layers[l].backward(&caches[l], &dh, edge, &b, Some(&mut d), Some(&mut dedge)).expect("backward");
                        dh = d;
                    }
                    dx = dh;
                    for (l, layer) in layers.iter().enumerate() {
                        transformer_grads(&case, layer, &format!("layers.{l}"));
                    }
                    close_host(&case.name, "grad.edge_attr", &dedge, case.f("grad.edge_attr"));
                }
                other => panic!("{}: unknown layer kind {other}", case.name),
            }
            close_host(&case.name, "grad.x", &dx, case.f("grad.x"));
            *seen.entry(if kind == "gt" { "stack".to_string() } else { kind }).or_default() += 1;
        }
        eprintln!("pyg_parity (host): {seen:?}");
        if std::env::var_os("TGRAG_GNN_LAYERS_FIXTURES").is_none() {
            assert_eq!(seen.len(), 4, "the committed set has every kind: {seen:?}");
        }
    }
}
