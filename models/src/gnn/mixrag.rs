//! MixRAG (paper §3): entity, relation and subgraph experts over a question's retrieved subgraph, a
//! query-aware GNN, and a node-wise mixture-of-experts gate whose pooled output (the paper's soft
//! prompt) feeds a trained answer head instead of the LLM. No code of MixRAG is published; every
//! choice the paper leaves open is written down here (and in the README):
//!
//! * **Inputs.** Node, relation and question texts as sentence embeddings (MiniLM here, Sentence-BERT
//!   in the paper), each projected to the model width `d` (`h_i`, `h_r`, `h_q`); the three experts
//!   work on the same node set, the subgraph retrieved for the question (§3.2: "the initial subgraph
//!   retrieved by subgraph retriever"); edges are used in both directions for message passing.
//! * **Scoring** `f` (entity and relation experts): `Linear(2d → d) → ReLU → Linear(d → 1)` on
//!   `[h ‖ h_q]`.
//! * **Gumbel-softmax** `p = softmax((φ + g)/τ)` with `g ~ Gumbel(0, 1)` drawn from the seeded
//!   stream while training (none at evaluation), `τ` annealed per epoch from `tau_start` to
//!   `tau_end` geometrically.
//! * **Differentiable top-k**: k rounds of successive softmax (round j: `a_j = softmax(l_j)` within
//!   the graph, `l_{j+1} = l_j + log(1 − a_j)`), the mask `m = min(1, Σ_j a_j)`; a graph with at most
//!   k elements keeps them all (the paper's k = 20 keeps every node of an ExplaGraphs graph).
//! * **Entity expert**: the node features times their mask, through a 2-layer GCN (symmetric
//!   normalisation with self-loops) over the subgraph; the node outputs `o_v^(e)` are the GCN's output
//!   times the mask.
//! * **Relation expert**: each triple `z_t = W_t [h_h; h_r; h_t]` (`W_t ∈ R^{d×3d}`), scored and
//!   masked the same way; the node outputs `o_v^(r)` are the mask-weighted mean of the triples the
//!   node is the head or tail of, through `Linear(d → d)` and ReLU (the paper does not say how
//!   triples become per-node outputs).
//! * **Subgraph expert**: the query-aware GNN of eqs. 2–7, `L` layers: per layer
//!   `α = Linear([z_i ‖ q])`, `β = Linear([z_j ‖ q])`, `γ = Linear([z_e ‖ q])` (scalars),
//!   `ζ = tanh(α + γ − β)`, `msg = Linear([z_i ‖ z_j ‖ z_e ‖ q])`, `z_j' = (1/d_j) Σ_i ζ·msg`
//!   (in-degree `d_j`), ReLU between layers (the paper shows none; without it stacked layers stay
//!   nearly linear); `q = h_q`, `z_e = h_r` at every layer.
//! * **Gate**: `φ_v = MLP(h_v + c_v)` with `c_v` a one-layer GCN context of the node features,
//!   `MLP = Linear(d → d) → ReLU → Linear(d → 3)`, softmax over the experts in use; the fused
//!   `h̃_v = Σ_i α_{v,i} o_v^(i)`, mean-pooled over the subgraph's nodes into the soft prompt.
//! * **Answer head** (no LLM): classification from `[soft prompt ‖ h_q]`, or node scores from
//!   `[h̃_v ‖ h_q]` (WebQSP), as [`crate::graphqa`].

use burn::module::Module;
use burn::tensor::activation::{relu, softmax, tanh};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{ModelError, Result};
use crate::gnn::batch::GraphBatch;
use crate::gnn::encoders::{scatter_sum, segment_softmax};
use crate::graphqa::HeadKind;
use crate::train::{Dense, Evaluation, Learner, Score, Stepped, Stream, fit, ints};

/// The three experts, in gate order.
pub const EXPERTS: [&str; 3] = ["entity", "relation", "subgraph"];

/// Sizes and switches of a MixRAG model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixShape {
    pub dim: usize,
    pub edge_dim: usize,
    pub question_dim: usize,
    /// Model width `d`.
    pub hidden: usize,
    /// Layers of the query-aware GNN (the paper's best: 3).
    pub layers: usize,
    /// Elements the differentiable top-k keeps per graph (the paper: 20).
    pub top_k: usize,
    /// Which experts take part (entity, relation, subgraph).
    pub experts: [bool; 3],
    pub head: HeadKind,
    pub head_hidden: usize,
}

impl MixShape {
    /// `mixrag` for all three experts, else `mixrag-<expert>+<expert>`.
    pub fn experts_name(experts: [bool; 3]) -> String {
        if experts == [true; 3] {
            return "mixrag".into();
        }
        let on: Vec<&str> = EXPERTS.iter().zip(experts).filter(|x| x.1).map(|x| *x.0).collect();
        format!("mixrag-{}", on.join("+"))
    }
}

/// Two-layer scoring MLP `f([h ‖ q])`.
#[derive(Module, Debug)]
struct Scorer {
    a: Dense,
    b: Dense,
}

impl Scorer {
    fn new(d: usize, rng: &mut Stream, dev: &Device) -> Self {
        Scorer { a: Dense::new(2 * d, d, rng, dev), b: Dense::new(d, 1, rng, dev) }
    }
    fn forward(&self, h: Tensor<2>, q: Tensor<2>) -> Tensor<2> {
        self.b.forward(relu(self.a.forward(Tensor::cat(vec![h, q], 1))))
    }
}

/// One layer of the query-aware GNN (eqs. 2–7).
#[derive(Module, Debug)]
struct QaLayer {
    alpha: Dense,
    beta: Dense,
    gamma: Dense,
    msg: Dense,
}

impl QaLayer {
    fn new(d: usize, rng: &mut Stream, dev: &Device) -> Self {
        QaLayer {
            alpha: Dense::new(2 * d, 1, rng, dev),
            beta: Dense::new(2 * d, 1, rng, dev),
            gamma: Dense::new(2 * d, 1, rng, dev),
            msg: Dense::new(4 * d, d, rng, dev),
        }
    }
}

/// The model.
#[derive(Module, Debug)]
pub struct MixRag {
    px: Dense,
    pe: Dense,
    pq: Dense,
    ent_score: Scorer,
    ent_gcn1: Dense,
    ent_gcn2: Dense,
    rel_t: Dense,
    rel_score: Scorer,
    rel_out: Dense,
    qgnn: Vec<QaLayer>,
    gate_ctx: Dense,
    gate1: Dense,
    gate2: Dense,
    h1: Dense,
    h2: Dense,
    experts_mask: [usize; 3],
    top_k: usize,
    nodes_head: usize,
}

/// What a forward pass gives besides the logits: the gate weights `[N, 3]`.
pub struct Forward {
    pub logits: Tensor<2>,
    pub gates: Tensor<2>,
}

/// The graph-side inputs of a batch in both directions, with the GCN weights of the subgraph.
struct Both {
    src: Tensor<1, Int>,
    dst: Tensor<1, Int>,
    /// Edge of each directed message (edges listed twice).
    edge: Tensor<1, Int>,
    /// 1 / in-degree of each message's destination.
    inv_deg: Tensor<2>,
    /// GCN (with self-loops): source, destination, weight.
    gsrc: Tensor<1, Int>,
    gdst: Tensor<1, Int>,
    gw: Tensor<2>,
    /// Graph of every edge.
    edge_graph: Tensor<1, Int>,
    edge_graph_h: Vec<u32>,
}

impl Both {
    fn new(g: &GraphBatch, dev: &Device) -> Both {
        let (n, m) = (g.n_nodes, g.n_edges);
        let mut s: Vec<u32> = g.src_h.clone();
        s.extend(&g.dst_h);
        let mut d: Vec<u32> = g.dst_h.clone();
        d.extend(&g.src_h);
        let edge: Vec<u32> = (0..m as u32).chain(0..m as u32).collect();
        let mut deg = vec![0f32; n];
        for &t in &d {
            deg[t as usize] += 1.0;
        }
        let inv: Vec<f32> = d.iter().map(|&t| 1.0 / deg[t as usize].max(1.0)).collect();
        // GCN over the symmetric edges plus self-loops.
        let (mut gs, mut gd) = (s.clone(), d.clone());
        gs.extend(0..n as u32);
        gd.extend(0..n as u32);
        let mut gdeg = vec![0f32; n];
        for &t in &gd {
            gdeg[t as usize] += 1.0;
        }
        let gw: Vec<f32> = gs.iter().zip(&gd).map(|(&a, &b)| 1.0 / (gdeg[a as usize] * gdeg[b as usize]).sqrt()).collect();
        let edge_graph: Vec<u32> = g.src_h.iter().map(|&v| g.node_graph_h[v as usize]).collect();
        Both {
            src: ints(&s, dev),
            dst: ints(&d, dev),
            edge: ints(&edge, dev),
            inv_deg: Tensor::from_data(TensorData::new(inv, [2 * m, 1]), dev),
            gsrc: ints(&gs, dev),
            gdst: ints(&gd, dev),
            gw: Tensor::from_data(TensorData::new(gw.clone(), [gw.len(), 1]), dev),
            edge_graph: ints(&edge_graph, dev),
            edge_graph_h: edge_graph,
        }
    }

    /// `Â x` over the subgraph (symmetric normalisation, self-loops).
    fn gcn(&self, x: Tensor<2>, n: usize) -> Tensor<2> {
        scatter_sum(x.select(0, self.gsrc.clone()) * self.gw.clone(), self.gdst.clone(), n)
    }
}

/// Gumbel noise (`−log(−log u)`) from the seeded stream.
pub(crate) fn gumbel(rows: usize, rng: &mut Stream, dev: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(gumbel_values(rows, rng), [rows, 1]), dev)
}

/// [`gumbel`]'s values on the host.
pub(crate) fn gumbel_values(rows: usize, rng: &mut Stream) -> Vec<f32> {
    (0..rows).map(|_| -(-(rng.unit().max(1e-12)).ln()).max(1e-12).ln() as f32).collect()
}

/// The differentiable top-k of the module docs (Xie & Ermon's successive softmax): the soft mask
/// `[R, 1]` of `logits` `[R, 1]` within each group; `group_h` is each row's group on the host. The
/// rows of a group of at most `k` rows are all kept (mask 1).
pub fn soft_top_k(logits: Tensor<2>, group_h: &[u32], groups: usize, k: usize) -> Tensor<2> {
    let dev = logits.device();
    let group = ints(group_h, &dev);
    let mut size = vec![0usize; groups];
    for &g in group_h {
        size[g as usize] += 1;
    }
    let small: Vec<f32> = group_h.iter().map(|&g| if size[g as usize] <= k { 1.0 } else { 0.0 }).collect();
    let small = Tensor::<2>::from_data(TensorData::new(small, [group_h.len(), 1]), &dev);
    let mut l = logits;
    let mut mask = l.zeros_like();
    for _ in 0..k.max(1) {
        let a = segment_softmax(l.clone(), group.clone(), groups);
        mask = mask + a.clone();
        l = l + (a.neg().add_scalar(1.0)).clamp_min(1e-6).log();
    }
    // Groups of k rows or fewer: every row kept.
    mask.clamp_max(1.0) * small.clone().neg().add_scalar(1.0) + small
}

impl MixRag {
    pub fn new(shape: MixShape, seed: u64, dev: &Device) -> Result<Self> {
        let MixShape { dim, edge_dim, question_dim, hidden: d, layers, top_k, experts, head, head_hidden } = shape;
        if layers == 0 || !experts.iter().any(|&e| e) {
            return Err(ModelError::Internal("mixrag: at least one query-aware GNN layer and one expert".into()));
        }
        let mut rng = Stream(seed ^ 0x6d69_7872);
        let out = match head {
            HeadKind::Classify { classes } => classes.max(1),
            HeadKind::Nodes => 1,
        };
        // Both heads read a d-wide vector next to h_q: the soft prompt, or a node's fused output.
        let head_in = d + d;
        Ok(MixRag {
            px: Dense::new(dim, d, &mut rng, dev),
            pe: Dense::new(edge_dim, d, &mut rng, dev),
            pq: Dense::new(question_dim, d, &mut rng, dev),
            ent_score: Scorer::new(d, &mut rng, dev),
            ent_gcn1: Dense::new(d, d, &mut rng, dev),
            ent_gcn2: Dense::new(d, d, &mut rng, dev),
            rel_t: Dense::new(3 * d, d, &mut rng, dev),
            rel_score: Scorer::new(d, &mut rng, dev),
            rel_out: Dense::new(d, d, &mut rng, dev),
            qgnn: (0..layers).map(|_| QaLayer::new(d, &mut rng, dev)).collect(),
            gate_ctx: Dense::new(d, d, &mut rng, dev),
            gate1: Dense::new(d, d, &mut rng, dev),
            gate2: Dense::new(d, 3, &mut rng, dev),
            h1: Dense::new(head_in, head_hidden, &mut rng, dev),
            h2: Dense::new(head_hidden, out, &mut rng, dev),
            experts_mask: experts.map(usize::from),
            top_k,
            nodes_head: usize::from(head == HeadKind::Nodes),
        })
    }

    /// Logits and gate weights of a batch; `noise`: Gumbel noise for the node and triple scores
    /// (training), `tau` the temperature.
    pub fn forward(&self, g: &GraphBatch, q: Tensor<2>, tau: f64, noise: Option<(Tensor<2>, Tensor<2>)>) -> Forward {
        let (fused, gates, hq, hqn) = self.fused(g, q, tau, noise);
        let logits = if self.nodes_head == 1 {
            self.h2.forward(relu(self.h1.forward(Tensor::cat(vec![fused, hqn], 1))))
        } else {
            let prompt = Self::pool(fused, g, &hq.device());
            self.h2.forward(relu(self.h1.forward(Tensor::cat(vec![prompt, hq], 1))))
        };
        Forward { logits, gates }
    }

    /// The paper's soft prompt of each graph, `[G, d]` (the gate-fused node states, mean-pooled),
    /// and the gate weights `[N, 3]`: what a language model reads ([`crate::graphqa::lm`]) where
    /// [`MixRag::forward`] has its answer head.
    pub fn soft_prompt(&self, g: &GraphBatch, q: Tensor<2>, tau: f64, noise: Option<(Tensor<2>, Tensor<2>)>) -> (Tensor<2>, Tensor<2>) {
        let dev = q.device();
        let (fused, gates, _, _) = self.fused(g, q, tau, noise);
        (Self::pool(fused, g, &dev), gates)
    }

    /// Mean of each graph's node rows.
    fn pool(fused: Tensor<2>, g: &GraphBatch, dev: &Device) -> Tensor<2> {
        let inv: Vec<f32> = g.counts.iter().map(|&c| 1.0 / c as f32).collect();
        let inv = Tensor::<2>::from_data(TensorData::new(inv, [g.n_graphs, 1]), dev);
        scatter_sum(fused, g.node_graph.clone(), g.n_graphs) * inv
    }

    /// The gate-fused node states, the gate weights, the projected question and its per-node copy.
    fn fused(
        &self,
        g: &GraphBatch,
        q: Tensor<2>,
        tau: f64,
        noise: Option<(Tensor<2>, Tensor<2>)>,
    ) -> (Tensor<2>, Tensor<2>, Tensor<2>, Tensor<2>) {
        let dev = q.device();
        let both = Both::new(g, &dev);
        let h = self.px.forward(g.x.clone());
        let hq = self.pq.forward(q);
        let hqn = hq.clone().select(0, g.node_graph.clone());
        let (node_noise, edge_noise) = noise.map_or((None, None), |(nn, ne)| (Some(nn), Some(ne)));
        let outs = [
            self.entity_expert(g, &both, &h, &hqn, tau, node_noise),
            self.relation_expert(g, &both, &h, &hq, tau, edge_noise),
            self.subgraph_expert(g, &both, &h, &hq),
        ];
        let (fused, gates) = self.gated(g, &both, h, &outs);
        (fused, gates, hq, hqn)
    }

    /// Model width `d` (the soft prompt's).
    pub fn width(&self) -> usize {
        self.px.d_out()
    }

    /// The entity expert: a Gumbel top-k of nodes by their question score, a masked 2-layer GCN.
    fn entity_expert(&self, g: &GraphBatch, both: &Both, h: &Tensor<2>, hqn: &Tensor<2>, tau: f64, noise: Option<Tensor<2>>) -> Tensor<2> {
        let n = g.n_nodes;
        let phi = self.ent_score.forward(h.clone(), hqn.clone());
        let phi = match noise {
            Some(nn) => phi + nn,
            None => phi,
        };
        let m = soft_top_k(phi.div_scalar(tau), &g.node_graph_h, g.n_graphs, self.top_k);
        let x = h.clone() * m.clone();
        let x = relu(self.ent_gcn1.bias(both.gcn(self.ent_gcn1.linear(x), n)));
        let x = self.ent_gcn2.bias(both.gcn(self.ent_gcn2.linear(x), n));
        x * m
    }

    /// The relation expert: triples `W_t[h; r; t]`, a Gumbel top-k by their question score, and per
    /// node the mask-weighted mean of its incident triples (head and tail).
    fn relation_expert(&self, g: &GraphBatch, both: &Both, h: &Tensor<2>, hq: &Tensor<2>, tau: f64, noise: Option<Tensor<2>>) -> Tensor<2> {
        let (n, d, dev) = (g.n_nodes, self.px.d_out(), h.device());
        if g.n_edges == 0 {
            return Tensor::zeros([n, d], &dev);
        }
        let he = self.pe.forward(g.edge_x.clone());
        let z = self.rel_t.forward(Tensor::cat(vec![h.clone().select(0, g.src.clone()), he, h.clone().select(0, g.dst.clone())], 1));
        let hqe = hq.clone().select(0, both.edge_graph.clone());
        let phi = self.rel_score.forward(z.clone(), hqe);
        let phi = match noise {
            Some(ne) => phi + ne,
            None => phi,
        };
        let w = soft_top_k(phi.div_scalar(tau), &both.edge_graph_h, g.n_graphs, self.top_k);
        let wz = z * w.clone();
        let ends = Tensor::cat(vec![g.src.clone(), g.dst.clone()], 0);
        let num = scatter_sum(Tensor::cat(vec![wz.clone(), wz], 0), ends.clone(), n);
        let den = scatter_sum(Tensor::cat(vec![w.clone(), w], 0), ends, n).clamp_min(1e-6);
        relu(self.rel_out.forward(num / den))
    }

    /// The subgraph expert: the query-aware GNN over the whole (retrieved) graph.
    fn subgraph_expert(&self, g: &GraphBatch, both: &Both, h: &Tensor<2>, hq: &Tensor<2>) -> Tensor<2> {
        let n = g.n_nodes;
        let mut z = h.clone();
        if g.n_edges == 0 {
            return z;
        }
        let ze = self.pe.forward(g.edge_x.clone()).select(0, both.edge.clone());
        let qe = hq.clone().select(0, g.node_graph.clone()).select(0, both.dst.clone());
        let layers = self.qgnn.len();
        for (li, l) in self.qgnn.iter().enumerate() {
            let zi = z.clone().select(0, both.src.clone());
            let zj = z.clone().select(0, both.dst.clone());
            let a = l.alpha.forward(Tensor::cat(vec![zi.clone(), qe.clone()], 1));
            let b = l.beta.forward(Tensor::cat(vec![zj.clone(), qe.clone()], 1));
            let c = l.gamma.forward(Tensor::cat(vec![ze.clone(), qe.clone()], 1));
            let zeta = tanh(a + c - b);
            let msg = l.msg.forward(Tensor::cat(vec![zi, zj, ze.clone(), qe.clone()], 1));
            let upd = scatter_sum(msg * zeta * both.inv_deg.clone(), both.dst.clone(), n);
            z = if li + 1 < layers { relu(upd) } else { upd };
        }
        z
    }

    /// The node-wise gate over the experts in use: the fused node states and the gate weights.
    fn gated(&self, g: &GraphBatch, both: &Both, h: Tensor<2>, outs: &[Tensor<2>; 3]) -> (Tensor<2>, Tensor<2>) {
        let (n, d, dev) = (g.n_nodes, self.px.d_out(), h.device());
        let ctx = relu(self.gate_ctx.bias(both.gcn(self.gate_ctx.linear(h.clone()), n)));
        let logits = self.gate2.forward(relu(self.gate1.forward(h + ctx)));
        let off: Vec<f32> = self.experts_mask.iter().map(|&on| if on == 1 { 0.0 } else { -1e4 }).collect();
        let off = Tensor::<2>::from_data(TensorData::new(off, [1, 3]), &dev);
        let gates = softmax(logits + off, 1);
        let fused = (0..3).fold(Tensor::<2>::zeros([n, d], &dev), |acc, i| acc + outs[i].clone() * gates.clone().slice([0..n, i..i + 1]));
        (fused, gates)
    }

    pub fn nodes_head(&self) -> bool {
        self.nodes_head == 1
    }
}

/// Hyper-parameters: G-Retriever's training (AdamW, decay, clipping, batches, early stopping) and
/// the Gumbel temperature schedule.
#[derive(Debug, Clone)]
pub struct MixConfig {
    pub qa: crate::graphqa::QaConfig,
    pub tau_start: f64,
    pub tau_end: f64,
}

impl Default for MixConfig {
    fn default() -> Self {
        MixConfig { qa: crate::graphqa::QaConfig::default(), tau_start: 1.0, tau_end: 0.1 }
    }
}

impl MixConfig {
    /// The temperature of a 1-based epoch: geometric from `tau_start` (epoch 1) to `tau_end` (last).
    pub fn tau(&self, epoch: usize) -> f64 {
        annealed(self.tau_start, self.tau_end, self.qa.train.epochs, epoch)
    }
}

/// The Gumbel temperature of a 1-based epoch of a run of `epochs`: geometric from `start` (epoch 1)
/// to `end` (the last). MixRAG's own training and the language-model path share it.
pub fn annealed(start: f64, end: f64, epochs: usize, epoch: usize) -> f64 {
    let e = epochs.max(2) as f64;
    let t = (epoch.max(1) - 1) as f64 / (e - 1.0);
    start * (end / start).powf(t.min(1.0))
}

use crate::graphqa::{QaEpoch, QaExample, batch_of, correct, loss_from, picks};

mod host;

/// Predictions (class index or top node per question) and each question's mean gate weights
/// (entity, relation, subgraph), with every node's gate weights (`[N, 3]` row-major, per question in
/// order).
#[derive(Debug, Default)]
pub struct MixPredictions {
    pub pred: Vec<u32>,
    pub question_gates: Vec<[f32; 3]>,
    pub node_gates: Vec<Vec<[f32; 3]>>,
}

/// Predictions of `model` (inner device) at temperature `tau` (the stage passes the kept epoch's),
/// without noise: on the host engine on the CPU, burn elsewhere.
pub fn predict(model: &MixRag, shape: &MixShape, examples: &[QaExample], tau: f64, batch: usize, dev: &Device) -> Result<MixPredictions> {
    if crate::device::host_engine(dev) {
        return host::predict(model, *shape, examples, tau, batch);
    }
    predict_burn(model, examples, shape.dim, shape.edge_dim, tau, batch, dev)
}

/// [`predict`] on burn, whatever the device.
pub(crate) fn predict_burn(
    model: &MixRag,
    examples: &[QaExample],
    dim: usize,
    edge_dim: usize,
    tau: f64,
    batch: usize,
    dev: &Device,
) -> Result<MixPredictions> {
    let mut out = MixPredictions::default();
    for chunk in examples.chunks(batch.max(1)) {
        let refs: Vec<&QaExample> = chunk.iter().collect();
        let (g, q) = batch_of(&refs, dim, edge_dim, dev)?;
        let f = model.forward(&g, q, tau, None);
        let logits = crate::train::floats(f.logits)?;
        let gates = crate::train::floats(f.gates)?;
        out.push_batch(model.nodes_head(), &logits, &gates, &g.offsets, &g.counts);
    }
    Ok(out)
}

impl MixPredictions {
    /// Adds a batch's predictions from its logits (per node for the node head, per graph for the
    /// classifier) and gates (`nodes × 3`), its graphs' first nodes and node counts.
    pub(crate) fn push_batch(&mut self, nodes_head: bool, logits: &[f32], gates: &[f32], offsets: &[usize], counts: &[usize]) {
        self.pred.extend(picks(nodes_head, logits, offsets, counts));
        for (&o, &c) in offsets.iter().zip(counts) {
            let rows: Vec<[f32; 3]> = (o..o + c).map(|v| [gates[v * 3], gates[v * 3 + 1], gates[v * 3 + 2]]).collect();
            let mut mean = [0f32; 3];
            for r in &rows {
                for k in 0..3 {
                    mean[k] += r[k] / c as f32;
                }
            }
            self.question_gates.push(mean);
            self.node_gates.push(rows);
        }
    }
}

fn evaluate(model: &MixRag, examples: &[QaExample], dim: usize, edge_dim: usize, tau: f64, dev: &Device) -> Result<(f64, f64)> {
    if examples.is_empty() {
        return Ok((0.0, 0.0));
    }
    let mut loss = (0.0, 0usize);
    for chunk in examples.chunks(64) {
        let refs: Vec<&QaExample> = chunk.iter().collect();
        let (g, q) = batch_of(&refs, dim, edge_dim, dev)?;
        let f = model.forward(&g, q, tau, None);
        if let Some(l) = loss_from(f.logits, model.nodes_head(), &refs, &g) {
            loss.0 += f64::from(l.into_scalar::<f32>()) * chunk.len() as f64;
            loss.1 += chunk.len();
        }
    }
    let p = predict_burn(model, examples, dim, edge_dim, tau, 64, dev)?;
    let hits = examples.iter().zip(&p.pred).filter(|(e, p)| correct(e, **p)).count();
    Ok((loss.0 / loss.1.max(1) as f64, hits as f64 / examples.len() as f64))
}

/// Trains MixRAG on `train`, keeping the epoch with the best metric on `val` (as
/// [`crate::graphqa::train`]); returns it on the inner device, its curve and the kept epoch. The CPU
/// trains on the host engine (a hand-written backward pass), a GPU on burn ([`train_on`]).
pub fn train(
    shape: MixShape,
    train: &[QaExample],
    val: &[QaExample],
    cfg: &MixConfig,
    dev: &Device,
) -> Result<(MixRag, Vec<QaEpoch>, u32)> {
    train_on(crate::device::host_engine(dev), shape, train, val, cfg, dev)
}

/// [`train`] on the host engine (`host`) or on burn's autodiff.
pub fn train_on(
    host: bool,
    shape: MixShape,
    train: &[QaExample],
    val: &[QaExample],
    cfg: &MixConfig,
    dev: &Device,
) -> Result<(MixRag, Vec<QaEpoch>, u32)> {
    if host {
        return host::train(shape, train, val, cfg, dev);
    }
    train_burn(shape, train, val, cfg, dev)
}

/// Seconds of each of `steps` optimiser steps (after one warm-up step) of MixRAG on consecutive
/// batches of `cfg.qa.train.batch` of `examples` at the first epoch's temperature (`make bench`): the
/// host engine (`host`) or burn's autodiff on `dev`.
pub fn step_times(host: bool, shape: MixShape, examples: &[QaExample], cfg: &MixConfig, steps: usize, dev: &Device) -> Result<Vec<f64>> {
    if examples.is_empty() {
        return Err(ModelError::Internal("no example to time".into()));
    }
    if host {
        return host::step_times(shape, examples, cfg, steps);
    }
    let ad = dev.clone().autodiff();
    let mut model = MixRag::new(shape, cfg.qa.seed, &ad)?;
    let mut optim = cfg.qa.train.adamw();
    let mut rng = Stream(cfg.qa.seed);
    let batch = cfg.qa.train.batch.max(1);
    let mut times = Vec::with_capacity(steps);
    for i in 0..=steps {
        let refs: Vec<&QaExample> = (0..batch).map(|j| &examples[(i * batch + j) % examples.len()]).collect();
        let t0 = std::time::Instant::now();
        let (g, q) = batch_of(&refs, shape.dim, shape.edge_dim, &ad)?;
        let noise = (gumbel(g.n_nodes, &mut rng, &ad), gumbel(g.n_edges, &mut rng, &ad));
        let f = model.forward(&g, q, cfg.tau(1), Some(noise));
        if let Some(loss) = loss_from(f.logits, model.nodes_head(), &refs, &g) {
            let _ = loss.clone().into_scalar::<f32>();
            let grads = burn::optim::GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(cfg.qa.train.lr, model, grads);
        }
        if i > 0 {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    Ok(times)
}

fn train_burn(
    shape: MixShape,
    train: &[QaExample],
    val: &[QaExample],
    cfg: &MixConfig,
    dev: &Device,
) -> Result<(MixRag, Vec<QaEpoch>, u32)> {
    const MODEL: &str = "MixRAG";
    let t = &cfg.qa.train;
    crate::train::check_lr(MODEL, t.lr)?;
    if train.is_empty() {
        return Err(ModelError::Internal("no training question".into()));
    }
    let ad = dev.clone().autodiff();
    let inner = ad.clone().inner();
    let model = MixRag::new(shape, cfg.qa.seed, &ad)?;
    let mut rng = Stream(cfg.qa.seed ^ 0x6d69_7874);
    let mut learner = MixLearner { train, val, shape, cfg, tau: cfg.tau(1), optim: t.adamw(), ad, inner };
    let f = fit(&t.plan(MODEL, cfg.qa.seed, train.len()), &mut learner, model, &mut rng)?;
    Ok((f.kept, f.curve, f.best_epoch))
}

/// MixRAG's training steps (Gumbel noise from the run's stream, the epoch's temperature) and
/// evaluation for [`crate::train::fit`].
struct MixLearner<'a> {
    train: &'a [QaExample],
    val: &'a [QaExample],
    shape: MixShape,
    cfg: &'a MixConfig,
    tau: f64,
    optim: burn::optim::ModuleOptimizer,
    ad: Device,
    inner: Device,
}

impl Learner for MixLearner<'_> {
    type Model = MixRag;
    type Kept = MixRag;
    type Row = QaEpoch;

    fn begin_epoch(&mut self, epoch: usize) {
        self.tau = self.cfg.tau(epoch);
    }

    fn step(&mut self, model: MixRag, batch: Option<&[usize]>, rng: &mut Stream) -> Result<Stepped<MixRag>> {
        let refs: Vec<&QaExample> = batch.unwrap_or_default().iter().map(|&i| &self.train[i]).collect();
        let (g, qt) = batch_of(&refs, self.shape.dim, self.shape.edge_dim, &self.ad)?;
        let noise = (gumbel(g.n_nodes, rng, &self.ad), gumbel(g.n_edges, rng, &self.ad));
        let f = model.forward(&g, qt, self.tau, Some(noise));
        let Some(loss) = loss_from(f.logits, model.nodes_head(), &refs, &g) else { return Ok((model, None)) };
        let step = (f64::from(loss.clone().into_scalar::<f32>()), refs.len() as f64);
        let grads = burn::optim::GradientsParams::from_grads(loss.backward(), &model);
        Ok((self.optim.step(self.cfg.qa.train.lr, model, grads), Some(step)))
    }

    fn evaluate(&mut self, model: &MixRag, epoch: usize, train_loss: f64) -> Result<Evaluation<MixRag, QaEpoch>> {
        let valid = model.valid();
        let (val_loss, val_metric) = evaluate(&valid, self.val, self.shape.dim, self.shape.edge_dim, self.tau, &self.inner)?;
        Ok(Evaluation {
            score: Score::Validated { metric: val_metric, loss: Some(val_loss) },
            keep: valid,
            row: QaEpoch { epoch: epoch as u32, train_loss, val_loss, val_metric },
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::train::floats;

    /// All three experts over the planted questions of [`crate::graphqa::tests::planted`] (4-wide
    /// node features, 2-wide edge features and questions, two classes).
    pub(crate) fn planted_shape(hidden: usize, top_k: usize) -> MixShape {
        MixShape {
            dim: 4,
            edge_dim: 2,
            question_dim: 2,
            hidden,
            layers: 2,
            top_k,
            experts: [true; 3],
            head: HeadKind::Classify { classes: 2 },
            head_hidden: hidden,
        }
    }

    #[test]
    fn soft_top_k_keeps_about_k_per_group_and_everything_in_small_groups() {
        let dev = Device::flex();
        // Group 0: six scores with two clear winners; group 1: two scores.
        let logits = Tensor::<2>::from_data(TensorData::new(vec![5.0f32, 4.5, -3.0, -3.0, -4.0, -5.0, 0.3, -0.2], [8, 1]), &dev);
        let groups = [0, 0, 0, 0, 0, 0, 1, 1];
        let m = floats(soft_top_k(logits.clone(), &groups, 2, 2)).unwrap();
        assert!(m[0] > 0.85 && m[1] > 0.85, "the two winners are kept: {m:?}");
        assert!(m[2..6].iter().all(|&x| x < 0.01), "the rest is not: {m:?}");
        let total: f32 = m[0..6].iter().sum();
        assert!((1.8..=2.0 + 1e-4).contains(&total), "about k in all: {m:?}");
        assert!(m[6] == 1.0 && m[7] == 1.0, "a group of k or fewer keeps all: {m:?}");
        // A lower temperature (scores × 10) makes the selection hard.
        let sharp = floats(soft_top_k(logits.mul_scalar(10.0), &groups, 2, 2)).unwrap();
        assert!(sharp[0] > 0.999 && sharp[1] > 0.99 && sharp[2..6].iter().all(|&x| x < 1e-6), "{sharp:?}");
    }

    /// The planted rule of the G-Retriever tests (the class is carried by one edge's features):
    /// MixRAG learns it with all experts, the subgraph expert alone learns it (the query-aware GNN
    /// reads edge features), training is deterministic, and gate weights are distributions.
    #[test]
    fn mixrag_learns_an_edge_carried_rule_deterministically() {
        let dev = Device::flex();
        let (tr, va) = (crate::graphqa::tests::planted(160, 1), crate::graphqa::tests::planted(60, 2));
        let shape = planted_shape(16, 20);
        let mut cfg = MixConfig::default();
        cfg.qa = crate::graphqa::QaConfig {
            train: crate::train::TrainConfig { lr: 5e-3, epochs: 25, patience: 25, batch: 16, ..cfg.qa.train },
            head_hidden: 16,
            ..cfg.qa
        };
        let (m, curve, best) = train(shape, &tr, &va, &cfg, &dev).expect("train");
        let kept = curve.iter().find(|c| c.epoch == best).expect("kept").val_metric;
        assert!(kept >= 0.9, "validation accuracy {kept}: {curve:?}");
        let p = predict(&m, &shape, &va, cfg.tau(25), 7, &dev.clone().autodiff().inner()).expect("predict");
        // The CPU predicts on the host engine: burn's predictions and gates, to rounding.
        let pb = predict_burn(&m, &va, 4, 2, cfg.tau(25), 64, &dev).expect("burn predict");
        assert_eq!(p.pred, pb.pred);
        for (a, b) in p.node_gates.iter().flatten().flatten().zip(pb.node_gates.iter().flatten().flatten()) {
            assert!((a - b).abs() <= 1e-5, "gate {a} vs burn's {b}");
        }
        let acc = va.iter().zip(&p.pred).filter(|(e, x)| correct(e, **x)).count() as f64 / va.len() as f64;
        assert!((acc - kept).abs() < 1e-9, "{acc} vs {kept}");
        for g in &p.question_gates {
            assert!((g.iter().sum::<f32>() - 1.0).abs() < 1e-4 && g.iter().all(|&x| x >= 0.0), "{g:?}");
        }
        let (_, again, _) = train(shape, &tr, &va, &cfg, &dev).expect("train");
        assert_eq!(curve, again);
        // A single expert: its gate weight is 1 everywhere.
        let only = MixShape { experts: [false, false, true], ..shape };
        let (m1, c1, b1) = train(only, &tr, &va, &cfg, &dev).expect("train");
        assert!(c1.iter().find(|c| c.epoch == b1).expect("kept").val_metric >= 0.85, "{c1:?}");
        let p1 = predict(&m1, &only, &va, 0.1, 64, &dev).expect("predict");
        assert!(p1.question_gates.iter().all(|g| g[2] > 0.999), "{:?}", &p1.question_gates[..2]);
        assert_eq!(MixShape::experts_name([true, false, true]), "mixrag-entity+subgraph");
        assert_eq!(MixShape::experts_name([true; 3]), "mixrag");
        assert!((cfg.tau(1) - 1.0).abs() < 1e-12 && (cfg.tau(25) - 0.1).abs() < 1e-9);
    }

    #[test]
    fn gumbel_noise_has_the_gumbel_mean() {
        let mut rng = Stream(1);
        let g = floats(gumbel(20_000, &mut rng, &Device::flex())).unwrap();
        let mean = g.iter().map(|&x| f64::from(x)).sum::<f64>() / g.len() as f64;
        // E[Gumbel(0, 1)] = Euler–Mascheroni γ ≈ 0.5772.
        assert!((mean - 0.5772).abs() < 0.03, "{mean}");
    }
}
