//! The pcst port against pcst_fast: the 18 cases of upstream `pcst_fast_test.cc` and the python
//! binding's tests (sets and exact output order), edge cases, input errors, properties of random
//! instances (forests, strong pruning never worse), and the pcst_fast fixture of `tests/fixtures/pcst`.

use super::*;

fn sorted(v: &[u32]) -> Vec<u32> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

/// Runs one upstream test case. `expected_*` are the upstream expectations
/// (compared sorted, as upstream does); `order` is the exact output of the C++
/// pcst_fast for the same call.
#[allow(clippy::too_many_arguments)]
fn run_algo(
    edges: &[(u32, u32)],
    prizes: &[f64],
    costs: &[f64],
    root: Option<usize>,
    num_clusters: usize,
    pruning: Pruning,
    expected_nodes: &[u32],
    expected_edges: &[u32],
    order: (&[u32], &[u32]),
) {
    let (nodes, edge_result) = pcst(edges, prizes, costs, root, num_clusters, pruning).unwrap_or_else(|e| panic!("valid input: {e:?}"));
    assert_eq!(sorted(&nodes), sorted(expected_nodes), "node set");
    assert_eq!(sorted(&edge_result), sorted(expected_edges), "edge set");
    assert_eq!((nodes.as_slice(), edge_result.as_slice()), order, "output order");
}

// ---- The 18 cases of upstream src/pcst_fast_test.cc. Upstream passes
// target_num_active_clusters = 0 when rooted; through the python-binding style
// API used here that is `root = Some(r), num_clusters = 1`.

const SIMPLE_EDGES: [(u32, u32); 2] = [(0, 1), (1, 2)];

#[test]
fn simple_test_rooted_no_pruning() {
    run_algo(&SIMPLE_EDGES, &[0.0, 5.0, 6.0], &[3.0, 4.0], Some(0), 1, Pruning::None, &[0, 1, 2], &[0, 1], (&[1, 2, 0], &[1, 0]));
}

#[test]
fn simple_test_unrooted_no_pruning() {
    run_algo(&SIMPLE_EDGES, &[0.0, 5.0, 6.0], &[3.0, 4.0], None, 1, Pruning::None, &[1, 2], &[1], (&[1, 2], &[1]));
}

#[test]
fn simple_test_unrooted_gw_pruning() {
    run_algo(&SIMPLE_EDGES, &[0.0, 5.0, 6.0], &[3.0, 4.0], None, 1, Pruning::Gw, &[1, 2], &[1], (&[1, 2], &[1]));
}

#[test]
fn simple_test_unrooted_strong_pruning() {
    run_algo(&SIMPLE_EDGES, &[0.0, 5.0, 6.0], &[3.0, 4.0], None, 1, Pruning::Strong, &[1, 2], &[1], (&[1, 2], &[1]));
}

const PATH4: [(u32, u32); 3] = [(0, 1), (1, 2), (2, 3)];

#[test]
fn simple2_test_rooted_no_pruning() {
    run_algo(
        &PATH4,
        &[10.0, 0.0, 1.0, 10.0],
        &[10.0, 4.0, 3.0],
        Some(0),
        1,
        Pruning::None,
        &[0, 1, 2, 3],
        &[1, 2],
        (&[2, 3, 1, 0], &[2, 1]),
    );
}

#[test]
fn simple2_test_rooted_gw_pruning() {
    run_algo(&PATH4, &[10.0, 0.0, 1.0, 10.0], &[10.0, 4.0, 3.0], Some(0), 1, Pruning::Gw, &[0], &[], (&[0], &[]));
}

#[test]
fn simple3_test_rooted_no_pruning() {
    run_algo(
        &PATH4,
        &[10.0, 10.0, 1.0, 10.0],
        &[10.0, 6.0, 5.0],
        Some(0),
        1,
        Pruning::None,
        &[0, 1, 2, 3],
        &[0, 1, 2],
        (&[2, 3, 1, 0], &[2, 1, 0]),
    );
}

#[test]
fn simple3_test_rooted_gw_pruning() {
    run_algo(
        &PATH4,
        &[10.0, 10.0, 1.0, 10.0],
        &[10.0, 6.0, 5.0],
        Some(0),
        1,
        Pruning::Gw,
        &[0, 1, 2, 3],
        &[0, 1, 2],
        (&[0, 1, 2, 3], &[0, 1, 2]),
    );
}

#[test]
fn simple4_test_rooted_no_pruning() {
    run_algo(&SIMPLE_EDGES, &[10.0, 3.0, 3.0], &[100.0, 2.0], Some(0), 1, Pruning::None, &[0, 1, 2], &[1], (&[1, 2, 0], &[1]));
}

#[test]
fn simple4_test_rooted_gw_pruning() {
    run_algo(&SIMPLE_EDGES, &[10.0, 3.0, 3.0], &[100.0, 2.0], Some(0), 1, Pruning::Gw, &[0], &[], (&[0], &[]));
}

#[test]
fn simple4_test_unrooted_gw_pruning() {
    run_algo(&SIMPLE_EDGES, &[10.0, 3.0, 3.0], &[100.0, 2.0], None, 2, Pruning::Gw, &[0, 1, 2], &[1], (&[0, 1, 2], &[1]));
}

#[test]
fn simple4b_test_unrooted_gw_pruning() {
    run_algo(&SIMPLE_EDGES, &[10.0, 3.0, 3.0], &[100.0, 2.0], None, 1, Pruning::Gw, &[0], &[], (&[0], &[]));
}

#[test]
fn simple5_test_unrooted_gw_pruning() {
    run_algo(&PATH4, &[10.0, 0.0, 6.0, 6.0], &[100.0, 2.0, 5.0], None, 2, Pruning::Gw, &[0, 2, 3], &[2], (&[0, 2, 3], &[2]));
}

#[test]
#[allow(clippy::excessive_precision)] // upstream's literals, kept verbatim
fn medium1_test_rooted_gw_pruning() {
    let edges = [
        (0, 1),
        (1, 2),
        (2, 3),
        (0, 9),
        (0, 2),
        (0, 3),
        (0, 5),
        (1, 9),
        (1, 3),
        (1, 5),
        (1, 7),
        (2, 8),
        (2, 3),
        (3, 4),
        (3, 5),
        (3, 6),
        (3, 7),
        (3, 8),
        (3, 9),
        (4, 5),
        (4, 6),
        (4, 7),
        (5, 8),
        (6, 8),
    ];
    let prizes = [
        0.032052554364677466,
        0.32473378289799926,
        0.069699345546302638,
        0.0,
        0.74867253235151754,
        0.19804330340026255,
        0.85430521133171622,
        0.83819939651391351,
        0.71744625276884877,
        0.016798567754083948,
    ];
    let a = 0.8;
    let b = 0.8800000000000001;
    let costs = [a, a, b, a, a, b, a, a, b, a, a, a, b, b, b, b, b, b, b, a, a, a, a, a];
    run_algo(&edges, &prizes, &costs, Some(3), 1, Pruning::Gw, &[3, 4, 6, 7, 8], &[16, 20, 21, 23], (&[3, 4, 6, 7, 8], &[16, 20, 23, 21]));
}

#[test]
fn simple6_test_unrooted_gw_pruning() {
    let edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7)];
    let prizes = [100.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 100.0];
    run_algo(
        &edges,
        &prizes,
        &[0.9; 7],
        None,
        1,
        Pruning::Gw,
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[0, 1, 2, 3, 4, 5, 6],
        (&[0, 1, 2, 3, 4, 5, 6, 7], &[4, 5, 1, 3, 6, 2, 0]),
    );
}

const SIMPLE7_EDGES: [(u32, u32); 4] = [(0, 1), (0, 2), (2, 3), (3, 4)];
const SIMPLE7_PRIZES: [f64; 5] = [0.0, 2.2, 0.0, 0.0, 2.1];

#[test]
fn simple7_test_unrooted_strong_pruning() {
    run_algo(&SIMPLE7_EDGES, &SIMPLE7_PRIZES, &[1.0; 4], None, 1, Pruning::Strong, &[1], &[], (&[1], &[]));
}

#[test]
fn simple7_test_unrooted_gw_pruning() {
    run_algo(
        &SIMPLE7_EDGES,
        &SIMPLE7_PRIZES,
        &[1.0; 4],
        None,
        1,
        Pruning::Gw,
        &[0, 1, 2, 3, 4],
        &[0, 1, 2, 3],
        (&[0, 1, 2, 3, 4], &[2, 1, 3, 0]),
    );
}

#[test]
fn simple8_test_unrooted_strong_pruning() {
    run_algo(&SIMPLE_EDGES, &[2.0, 2.0, 2.0], &[0.0, 5.0], None, 1, Pruning::Strong, &[0, 1], &[0], (&[0, 1], &[0]));
}

// ---- The 3 cases of upstream src/test_pcst_fast.py.

#[test]
fn py_test_simple1() {
    // Upstream checks the exact order here.
    let (nodes, edges) = pcst(&PATH4, &[1.0; 4], &[0.8, 1.8, 2.8], None, 1, Pruning::Strong).unwrap_or_else(|e| panic!("valid: {e:?}"));
    assert_eq!(nodes, [0, 1]);
    assert_eq!(edges, [0]);
}

#[test]
fn py_test_simple2() {
    run_algo(&SIMPLE_EDGES, &[0.0, 5.0, 6.0], &[3.0, 4.0], Some(0), 1, Pruning::None, &[0, 1, 2], &[0, 1], (&[1, 2, 0], &[1, 0]));
}

#[test]
fn py_test_num_clusters() {
    //  0---1---2---3
    //      |   |   |
    //      4   5   6
    let edges = [(0, 1), (1, 2), (1, 4), (2, 3), (2, 5), (3, 6)];
    let prizes = [100.0, 0.0, 0.0, 0.0, 100.0, 100.0, 100.0];
    let costs = [10.0, 100.0, 10.0, 10.0, 10.0, 10.0];
    run_algo(
        &edges,
        &prizes,
        &costs,
        None,
        2,
        Pruning::Strong,
        &[0, 1, 2, 3, 4, 5, 6],
        &[0, 2, 3, 4, 5],
        (&[0, 1, 2, 3, 4, 5, 6], &[0, 2, 4, 5, 3]),
    );
}

// ---- Edge cases.

#[test]
fn empty_and_trivial_graphs() {
    assert_eq!(pcst(&[], &[], &[], None, 1, Pruning::Gw), Ok((vec![], vec![])));
    assert_eq!(pcst(&[], &[3.0], &[], None, 1, Pruning::Strong), Ok((vec![0], vec![])));
    assert_eq!(pcst(&[], &[3.0], &[], Some(0), 1, Pruning::Gw), Ok((vec![0], vec![])));
    // More clusters requested than nodes: nothing is grown, every node is kept.
    assert_eq!(pcst(&[(0, 1)], &[1.0, 1.0], &[0.5], None, 5, Pruning::Gw), Ok((vec![0, 1], vec![])));
    // All prizes zero: every cluster deactivates at time 0 in index order, the
    // last one stays active (pcst_fast returns that single vertex).
    assert_eq!(pcst(&SIMPLE_EDGES, &[0.0; 3], &[1.0, 1.0], None, 1, Pruning::Gw), Ok((vec![2], vec![])));
    // Self-loops and parallel edges are accepted, as in pcst_fast.
    let (v, e) =
        pcst(&[(0, 0), (0, 1), (0, 1)], &[2.0, 2.0], &[0.1, 1.0, 0.5], None, 1, Pruning::Gw).unwrap_or_else(|e| panic!("valid: {e:?}"));
    assert_eq!((v, e), (vec![0, 1], vec![2]));
}

#[test]
fn pruning_names() {
    assert_eq!("none".parse(), Ok(Pruning::None));
    assert_eq!("simple".parse(), Ok(Pruning::Simple));
    assert_eq!("gw".parse(), Ok(Pruning::Gw));
    assert_eq!("strong".parse(), Ok(Pruning::Strong));
    assert!("GW".parse::<Pruning>().is_err());
    assert!("".parse::<Pruning>().is_err());
}

// ---- Errors.

fn err(r: Result<(Vec<u32>, Vec<u32>), PcstError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn invalid_inputs_are_errors() {
    let e = &SIMPLE_EDGES;
    let ok_p = [1.0, 1.0, 1.0];
    let ok_c = [1.0, 1.0];
    let m = err(pcst(e, &[1.0, -0.5, 1.0], &ok_c, None, 1, Pruning::Gw));
    assert!(m.contains("node 1") && m.contains("negative") && m.contains("-0.5"), "{m}");
    let m = err(pcst(e, &[1.0, 1.0, f64::NAN], &ok_c, None, 1, Pruning::Gw));
    assert!(m.contains("node 2") && m.contains("not finite") && m.contains("NaN"), "{m}");
    let m = err(pcst(e, &ok_p, &[1.0, f64::INFINITY], None, 1, Pruning::Gw));
    assert!(m.contains("edge 1") && m.contains("not finite") && m.contains("inf"), "{m}");
    let m = err(pcst(e, &ok_p, &[-2.0, 1.0], None, 1, Pruning::Gw));
    assert!(m.contains("edge 0") && m.contains("negative") && m.contains("-2"), "{m}");
    let m = err(pcst(&[(0, 1), (1, 3)], &ok_p, &ok_c, None, 1, Pruning::Gw));
    assert!(m.contains("edge 1") && m.contains("out of range"), "{m}");
    let m = err(pcst(e, &ok_p, &ok_c, Some(3), 1, Pruning::Gw));
    assert!(m.contains("root 3") && m.contains("out of range"), "{m}");
    let m = err(pcst(e, &ok_p, &ok_c, Some(0), 2, Pruning::Gw));
    assert!(m.contains("rooted") && m.contains("num_clusters = 2"), "{m}");
    let m = err(pcst(e, &ok_p, &ok_c, Some(0), 0, Pruning::Gw));
    assert!(m.contains("rooted"), "{m}");
    let m = err(pcst(e, &ok_p, &ok_c, None, 0, Pruning::Gw));
    assert!(m.contains("num_clusters"), "{m}");
    let m = err(pcst(e, &ok_p, &[1.0], None, 1, Pruning::Gw));
    assert!(m.contains("costs has 1") && m.contains("2 edges"), "{m}");
    let m = err(pcst(e, &ok_p, &[1.0, 1.0, 1.0], None, 1, Pruning::Gw));
    assert!(m.contains("costs has 3"), "{m}");
    // Negative zero is not negative (as in the C++ `< 0.0` checks).
    assert!(pcst(e, &[-0.0, 1.0, 1.0], &[-0.0, 1.0], None, 1, Pruning::Gw).is_ok());
}

// ---- Property tests on random small graphs.

/// xorshift64* generator (deterministic, no dependencies).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct Instance {
    edges: Vec<(u32, u32)>,
    prizes: Vec<f64>,
    costs: Vec<f64>,
}

/// Random multigraph with a mix of tie-heavy and continuous prizes/costs.
fn random_instance(rng: &mut Rng) -> Instance {
    let n = 1 + rng.below(30) as usize;
    let m = rng.below(3 * n as u64 + 1) as usize;
    let ties = rng.below(2) == 0;
    let prizes = (0..n)
        .map(|_| {
            if rng.below(3) == 0 {
                0.0
            } else if ties {
                rng.below(4) as f64
            } else {
                rng.unit() * 4.0
            }
        })
        .collect();
    let edges: Vec<(u32, u32)> = (0..m).map(|_| (rng.below(n as u64) as u32, rng.below(n as u64) as u32)).collect();
    let costs = (0..m).map(|_| if ties { 0.5 * rng.below(4) as f64 } else { rng.unit() * 2.0 }).collect();
    Instance { edges, prizes, costs }
}

/// Prizes of the vertices not selected plus costs of the selected edges.
fn objective(inst: &Instance, vertices: &[u32], edges: &[u32]) -> f64 {
    let mut selected = vec![false; inst.prizes.len()];
    for &v in vertices {
        selected[v as usize] = true;
    }
    let missed: f64 = (0..inst.prizes.len()).filter(|&v| !selected[v]).map(|v| inst.prizes[v]).sum();
    missed + edges.iter().map(|&e| inst.costs[e as usize]).sum::<f64>()
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// The output is a forest of the input graph: distinct in-range vertices and
/// edges, every edge's endpoints are returned vertices, no cycle.
fn assert_forest(inst: &Instance, vertices: &[u32], edges: &[u32], what: &str) {
    let n = inst.prizes.len();
    let mut in_set = vec![false; n];
    for &v in vertices {
        assert!((v as usize) < n, "{what}: vertex {v} out of range");
        assert!(!in_set[v as usize], "{what}: vertex {v} twice");
        in_set[v as usize] = true;
    }
    let mut seen_edge = vec![false; inst.edges.len()];
    let mut parent: Vec<usize> = (0..n).collect();
    for &e in edges {
        assert!((e as usize) < inst.edges.len(), "{what}: edge {e} out of range");
        assert!(!seen_edge[e as usize], "{what}: edge {e} twice");
        seen_edge[e as usize] = true;
        let (u, v) = inst.edges[e as usize];
        assert!(in_set[u as usize] && in_set[v as usize], "{what}: edge {e} endpoint missing");
        let (ru, rv) = (find(&mut parent, u as usize), find(&mut parent, v as usize));
        assert_ne!(ru, rv, "{what}: edge {e} closes a cycle");
        parent[ru] = rv;
    }
}

#[test]
fn random_outputs_are_forests() {
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    for case in 0..3000 {
        let inst = random_instance(&mut rng);
        let n = inst.prizes.len();
        let root = (rng.below(3) == 0).then(|| rng.below(n as u64) as usize);
        let k = if root.is_some() { 1 } else { 1 + rng.below(3) as usize };
        for pruning in [Pruning::None, Pruning::Simple, Pruning::Gw, Pruning::Strong] {
            let (v, e) = pcst(&inst.edges, &inst.prizes, &inst.costs, root, k, pruning).unwrap_or_else(|e| panic!("valid instance: {e:?}"));
            let what = format!("case {case} {pruning:?} root {root:?} k {k}");
            assert_forest(&inst, &v, &e, &what);
            // Deterministic: a second run gives the very same output.
            let again = pcst(&inst.edges, &inst.prizes, &inst.costs, root, k, pruning);
            assert_eq!(again, Ok((v, e)), "{what}: not deterministic");
        }
    }
}

/// Strong pruning keeps, in every tree of the simple-pruned forest, a
/// maximum-net-worth connected subtree (containing the root in the root's
/// tree); GW pruning and simple pruning keep *some* non-empty connected subtree
/// of each tree (GW pruning only ever cuts off the far side of an edge, and it
/// keeps every edge that joined the root cluster). Hence, up to floating-point
/// rounding (the DP adds in a different order than the objective), the strong
/// objective is never above the GW or the simple one.
#[test]
fn strong_pruning_is_never_worse_than_gw_or_simple() {
    let mut rng = Rng(0xDEAD_BEEF_CAFE_F00D);
    for case in 0..3000 {
        let inst = random_instance(&mut rng);
        let n = inst.prizes.len();
        let root = (rng.below(3) == 0).then(|| rng.below(n as u64) as usize);
        let k = if root.is_some() { 1 } else { 1 + rng.below(3) as usize };
        let solve = |p| {
            let (v, e) = pcst(&inst.edges, &inst.prizes, &inst.costs, root, k, p).unwrap_or_else(|e| panic!("valid instance: {e:?}"));
            objective(&inst, &v, &e)
        };
        let strong = solve(Pruning::Strong);
        let tol = 1e-9 * strong.abs().max(1.0);
        for other in [Pruning::Gw, Pruning::Simple] {
            let o = solve(other);
            assert!(strong <= o + tol, "case {case} root {root:?} k {k}: strong {strong} > {other:?} {o}");
        }
    }
}

/// Parity with pcst_fast 1.0.10 on the fixture (239 instances of ≤ 500 nodes, unrooted, one cluster,
/// `gw`): the same vertices and edges in the same order, and never a worse objective.
#[test]
fn matches_pcst_fast_on_the_fixture() -> crate::shared::test_support::TestResult {
    use crate::shared::test_support::{f64s, fixture, i64s};
    use std::collections::BTreeMap;
    let dir = fixture("pcst");
    let read = |f: &str| tgrag_schemas::io::read_parquet(&dir.join(f));
    let (nodes, edges, rv, re, res) = (
        read("nodes.parquet")?,
        read("edges.parquet")?,
        read("result_vertices.parquet")?,
        read("result_edges.parquet")?,
        read("results.parquet")?,
    );
    let (ni, nn, np) = (i64s(&nodes, "instance_id")?, i64s(&nodes, "node")?, f64s(&nodes, "prize")?);
    let (ei, ex, es, ed, ec) =
        (i64s(&edges, "instance_id")?, i64s(&edges, "edge_index")?, i64s(&edges, "src")?, i64s(&edges, "dst")?, f64s(&edges, "cost")?);
    type Inst = (Vec<(i64, f64)>, Vec<(i64, (u32, u32), f64)>, Vec<(i64, u32)>, Vec<(i64, u32)>);
    let mut inst: BTreeMap<i64, Inst> = BTreeMap::new();
    for i in 0..ni.len() {
        inst.entry(ni[i]).or_default().0.push((nn[i], np[i]));
    }
    for i in 0..ei.len() {
        inst.entry(ei[i]).or_default().1.push((ex[i], (es[i] as u32, ed[i] as u32), ec[i]));
    }
    let (vi, vp, vn) = (i64s(&rv, "instance_id")?, i64s(&rv, "pos")?, i64s(&rv, "node")?);
    for i in 0..vi.len() {
        inst.entry(vi[i]).or_default().2.push((vp[i], vn[i] as u32));
    }
    let (xi, xp, xe) = (i64s(&re, "instance_id")?, i64s(&re, "pos")?, i64s(&re, "edge_index")?);
    for i in 0..xi.len() {
        inst.entry(xi[i]).or_default().3.push((xp[i], xe[i] as u32));
    }
    let objective: BTreeMap<i64, f64> = i64s(&res, "instance_id")?.into_iter().zip(f64s(&res, "objective")?).collect();
    let (mut same_order, mut total) = (0, 0);
    for (id, (mut ns, mut es, mut v, mut e)) in inst {
        ns.sort_by_key(|x| x.0);
        es.sort_by_key(|x| x.0);
        v.sort_by_key(|x| x.0);
        e.sort_by_key(|x| x.0);
        let prizes: Vec<f64> = ns.iter().map(|x| x.1).collect();
        let edge_list: Vec<(u32, u32)> = es.iter().map(|x| x.1).collect();
        let costs: Vec<f64> = es.iter().map(|x| x.2).collect();
        let (gv, ge) = pcst(&edge_list, &prizes, &costs, None, 1, Pruning::Gw)?;
        let obj = prizes.iter().sum::<f64>() - gv.iter().map(|&x| prizes[x as usize]).sum::<f64>()
            + ge.iter().map(|&x| costs[x as usize]).sum::<f64>();
        let want = objective.get(&id).copied().unwrap_or(f64::INFINITY);
        assert!(obj <= want + 1e-9 * want.abs().max(1.0), "instance {id}: objective {obj} worse than pcst_fast's {want}");
        total += 1;
        same_order += usize::from(gv == v.iter().map(|x| x.1).collect::<Vec<_>>() && ge == e.iter().map(|x| x.1).collect::<Vec<_>>());
    }
    assert_eq!(total, 239);
    assert_eq!(same_order, total, "vertices and edges in pcst_fast's order on every instance");
    Ok(())
}
