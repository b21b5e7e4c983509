//! Graph neural networks: defined in burn (trained on wgpu with `--device gpu`) and trained on the CPU by
//! their host engines (`host`, `fast`). A folder that new encoders (graph transformer, query-aware GNN) join
//! as modules of their own.
//!
//! * [`graph`]: propagation over an edge list (GCN's normalised adjacency, SAGE's neighbour mean);
//! * [`node`]: TopoRAG's node classifiers (paper §6.1.3, Table 3);
//! * [`link`]: TopoRAG's link predictor;
//! * [`fast`]: the node classifiers and the link predictor again on host buffers with a hand-written
//!   backward pass (TopoRAG's many small CPU trainings; the burn trainers run them on a GPU);
//! * [`host`]: the GraphQA encoders' layers again on host buffers with a hand-written backward pass
//!   (the CPU trainer of [`crate::graphqa`]);
//! * [`batch`]: mini-batches of small graphs as one block-diagonal graph;
//! * [`encoders`]: the graph encoders of G-Retriever (GCN, GAT, graph transformer) and Efficient
//!   G-Retriever, with mean or attention pooling;
//! * [`mixrag`]: MixRAG's entity, relation and subgraph experts, the query-aware GNN and the
//!   node-wise mixture-of-experts gate.
//!
//! For TopoRAG's task-oriented evaluation, trained full-batch:
//!
//! * node classification with a 2-layer **GCN** (Kipf & Welling: Â = D^-½(A+I)D^-½, linear then
//!   propagate, bias after), **GraphSAGE** (mean aggregator, PyG `SAGEConv`: W_l·mean(N(i)) + W_r·x_i)
//!   or **MLP**; ReLU, dropout on the input and the hidden layer, softmax cross-entropy on the
//!   training nodes, Adam with L2 weight decay (torch semantics), early stopping on validation
//!   accuracy (`crate::train::fit`'s rule) with the test accuracy of the kept epoch reported;
//! * link prediction with a 2-layer GCN encoder and an MLP predictor on h_u ⊙ h_v (OGB's
//!   `LinkPredictor`), binary cross-entropy against one uniformly drawn negative pair per positive
//!   per epoch, and OGB's Hits@K against a fixed set of negative pairs.
//!
//! Determinism: weights (Glorot uniform, zero biases), dropout masks and negatives come from a
//! SplitMix64 stream of the seed, never from the backend's global generator, so a seed gives the same
//! curves on every run (full-batch; Flex's products and scatter-adds have a fixed order).

pub mod batch;
pub mod encoders;
pub mod fast;
pub mod graph;
pub mod host;
pub mod link;
pub mod mixrag;
pub mod node;
pub(crate) mod reuse;

pub use crate::train::{EpochRow, Trained};
pub use graph::{Entries, GraphOps, normalised_entries};
pub use link::{LinkModel, LinkPredConfig, LinkPredData, hits_at_k, train_link_predictor};
pub use node::{NodeClassConfig, NodeClassData, NodeClassifier, train_node_classifier};

/// Node-classification architectures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GnnKind {
    Gcn,
    Sage,
    Mlp,
}

impl GnnKind {
    pub const ALL: [GnnKind; 3] = [GnnKind::Gcn, GnnKind::Sage, GnnKind::Mlp];

    pub fn as_str(self) -> &'static str {
        match self {
            GnnKind::Gcn => "gcn",
            GnnKind::Sage => "sage",
            GnnKind::Mlp => "mlp",
        }
    }
}
