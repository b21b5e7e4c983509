//! MoR's reranking inputs (the Organizing step): the structure-aware reranker of
//! [`tgrag_models::reranker`] reads, per candidate, the last three nodes of its trajectory: their
//! BM25 scores (`ln(1 + s)`), node types and how each was reached, plus the candidate's dense score.

use std::collections::HashMap;

use tgrag_models::reranker::Trajectory;

use crate::kb::kb::TypedGraph;
use crate::kb::traversal::Traj;

/// One query's candidates for one method: (node, score, trajectory).
pub type Ranked = Vec<(u32, f32, Traj)>;

/// The reranker's features of a trajectory: positions 0..3 hold the last three path nodes (oldest
/// first, left-padded with zeros), `tf[3]` the candidate's dense score; node types are shifted by one
/// (0 = padding); `ti` is 1 for a textual match and 2 for a structural step.
pub fn features(tr: &Traj, bm25: &HashMap<u32, f32>, dense: f32, g: &TypedGraph) -> Trajectory {
    let k = tr.path.len();
    let mut f = Trajectory { tf: [0.0, 0.0, 0.0, dense], sf: [0; 3], ti: [0; 3] };
    for j in 0..3.min(k) {
        let node = tr.path[k - 1 - j];
        f.tf[2 - j] = bm25.get(&node).copied().unwrap_or(0.0).ln_1p();
        f.sf[2 - j] = u32::from(g.node_type[node as usize]) + 1;
        f.ti[2 - j] = u32::from(tr.via[k - 1 - j]);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_take_the_last_three_nodes_right_aligned() {
        // Types: brand (0) for node 0, product (1) for nodes 1..4.
        let g = TypedGraph::new(&["brand", "product", "product", "product"], &[(1, 0, "has_brand")]).expect("graph");
        let bm = HashMap::from([(0, 1.0f32), (3, 3.0)]);
        // Path 0 → 1 → 2 → 3: the first node falls off; 1 and 2 have no BM25 score.
        let long = Traj { path: vec![0, 1, 2, 3], via: vec![1, 2, 2, 1], traversal: 0 };
        let f = features(&long, &bm, 0.5, &g);
        assert_eq!(f.tf, [0.0, 0.0, 3.0f32.ln_1p(), 0.5]);
        assert_eq!(f.sf, [2, 2, 2]);
        assert_eq!(f.ti, [2, 2, 1]);
        // A one-node trajectory sits in the last slot, padding before it.
        let short = Traj { path: vec![0], via: vec![1], traversal: 255 };
        let f = features(&short, &bm, -0.25, &g);
        assert_eq!(f.tf, [0.0, 0.0, 1.0f32.ln_1p(), -0.25]);
        assert_eq!(f.sf, [0, 0, 1]);
        assert_eq!(f.ti, [0, 0, 1]);
    }
}
