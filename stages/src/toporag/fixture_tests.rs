//! The topology stages against `../shared/fixtures/{diffusion,graphwave}` (scipy / numpy
//! references; skipped with a message when the shared fixtures are absent).

use std::collections::HashMap;

use arrow::array::{Array, AsArray};
use arrow::record_batch::RecordBatch;

use crate::toporag::diffusion::{Adjacency, cosine_top_k, diffuse_f32, diffuse_f64};
use crate::toporag::graphwave::{Mode, embed, sample_points};

use crate::shared::test_support::{TestResult, f64s, fixture, i64s};

/// Per-graph rows of a fixture table: `graph_id` → row indices.
fn rows_by_graph(b: &RecordBatch) -> TestResult<HashMap<i64, Vec<usize>>> {
    let mut out: HashMap<i64, Vec<usize>> = HashMap::new();
    for (i, g) in i64s(b, "graph_id")?.into_iter().enumerate() {
        out.entry(g).or_default().push(i);
    }
    Ok(out)
}

/// Row-major block of the columns `prefix00..` for the given rows.
fn block(b: &RecordBatch, prefix: &str, rows: &[usize]) -> TestResult<(Vec<f64>, usize)> {
    let cols: Vec<String> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|n| n.starts_with(prefix) && n[prefix.len()..].chars().all(|c| c.is_ascii_digit()))
        .collect();
    let data: Vec<Vec<f64>> = cols.iter().map(|c| f64s(b, c)).collect::<TestResult<_>>()?;
    let mut out = Vec::with_capacity(rows.len() * cols.len());
    for &r in rows {
        out.extend(data.iter().map(|c| c[r]));
    }
    Ok((out, cols.len()))
}

#[test]
fn diffusion_matches_scipy_fixture() -> TestResult {
    let Some(dir) = fixture("diffusion") else { return Ok(()) };
    let read = |f: &str| tgrag_schemas::io::read_parquet(&dir.join(f));
    let (graphs, edges, r, p, nb) =
        (read("graphs.parquet")?, read("edges.parquet")?, read("R.parquet")?, read("P.parquet")?, read("neighbors.parquet")?);
    let directed: Vec<bool> =
        graphs.column_by_name("directed").ok_or("directed")?.as_boolean().iter().map(|v| v.unwrap_or(false)).collect();
    let (gids, ns) = (i64s(&graphs, "graph_id")?, i64s(&graphs, "n_nodes")?);
    let (e_rows, r_rows, p_rows, nb_rows) = (rows_by_graph(&edges)?, rows_by_graph(&r)?, rows_by_graph(&p)?, rows_by_graph(&nb)?);
    let (esrc, edst, rnode) = (i64s(&edges, "src")?, i64s(&edges, "dst")?, i64s(&r, "node")?);
    let (palpha, pnode) = (i64s(&p, "alpha_id")?, i64s(&p, "node")?);
    let (nalpha, nnode, nrank, nnb, ncos) =
        (i64s(&nb, "alpha_id")?, i64s(&nb, "node")?, i64s(&nb, "rank")?, i64s(&nb, "neighbor")?, f64s(&nb, "cos")?);
    let mut compared = (0usize, 0usize, 0usize);
    for (gi, &g) in gids.iter().enumerate() {
        let n = ns[gi] as usize;
        let er = e_rows.get(&g).ok_or("edges")?;
        let src: Vec<u32> = er.iter().map(|&i| esrc[i] as u32).collect();
        let dst: Vec<u32> = er.iter().map(|&i| edst[i] as u32).collect();
        let adj = Adjacency::from_edges(n, &src, &dst, directed[gi])?;
        let rr = r_rows.get(&g).ok_or("R")?;
        assert!(rr.iter().enumerate().all(|(k, &i)| rnode[i] as usize == k), "R rows of graph {g} are not in node order");
        let (rmat, d) = block(&r, "r", rr)?;
        let r32: Vec<f32> = rmat.iter().map(|&v| v as f32).collect();
        for (alpha_id, alphas) in [(0i64, [1.0, 1.0, 1.0]), (1, [0.5, 0.3, 0.2])] {
            let got = diffuse_f64(&adj, &rmat, d, &alphas);
            let got32 = diffuse_f32(&adj, &r32, d, &alphas);
            let rows: Vec<usize> = p_rows.get(&g).ok_or("P")?.iter().copied().filter(|&i| palpha[i] == alpha_id).collect();
            let (want, _) = block(&p, "p", &rows)?;
            for (k, &i) in rows.iter().enumerate() {
                let node = pnode[i] as usize;
                for c in 0..d {
                    let w = want[k * d + c];
                    let (g64, g32) = (got[node * d + c], f64::from(got32[node * d + c]));
                    assert!((g64 - w).abs() <= 1e-9 * w.abs().max(1.0), "graph {g} alpha {alpha_id} node {node} col {c}: {g64} vs {w}");
                    assert!((g32 - w).abs() <= 1e-4 * w.abs().max(1.0), "f32 graph {g} node {node} col {c}: {g32} vs {w}");
                }
                compared.0 += 1;
            }
            let Some(nr) = nb_rows.get(&g) else { continue };
            let all: Vec<u32> = (0..n as u32).collect();
            let tops = cosine_top_k(&got, d, &all, &all, 10);
            let cos = |a: usize, b: usize| {
                let (x, y) = (&got[a * d..a * d + d], &got[b * d..b * d + d]);
                let (nx, ny) = (x.iter().map(|v| v * v).sum::<f64>().sqrt(), y.iter().map(|v| v * v).sum::<f64>().sqrt());
                if nx == 0.0 || ny == 0.0 { 0.0 } else { x.iter().zip(y).map(|(a, b)| a * b).sum::<f64>() / (nx * ny) }
            };
            for &i in nr.iter().filter(|&&i| nalpha[i] == alpha_id) {
                let (node, rank) = (nnode[i] as usize, nrank[i] as usize);
                let mine = &tops[node][rank - 1];
                // Same id, or an id tied with the fixture's at this rank (cos within 1e-9).
                assert!((mine.score - ncos[i]).abs() < 1e-9, "graph {g} node {node} rank {rank}: cos {} vs {}", mine.score, ncos[i]);
                assert!((cos(node, nnb[i] as usize) - ncos[i]).abs() < 1e-9);
                if mine.node as i64 == nnb[i] {
                    compared.1 += 1;
                } else {
                    compared.2 += 1;
                }
            }
        }
    }
    assert!(compared.1 > 50 * compared.2.max(1), "too many neighbour ids differ beyond ties: {compared:?}");
    eprintln!("diffusion fixture: {} P rows, {} neighbour ids equal, {} tied differently", compared.0, compared.1, compared.2);
    Ok(())
}

/// The graphs of the GraphWave fixture as `(graph_id, undirected adjacency)`.
fn graphwave_graphs(dir: &std::path::Path) -> TestResult<Vec<(i64, Adjacency)>> {
    let read = |f: &str| tgrag_schemas::io::read_parquet(&dir.join(f));
    let (graphs, edges) = (read("graphs.parquet")?, read("edges.parquet")?);
    let (gids, ns) = (i64s(&graphs, "graph_id")?, i64s(&graphs, "n_nodes")?);
    let e_rows = rows_by_graph(&edges)?;
    let (esrc, edst) = (i64s(&edges, "src")?, i64s(&edges, "dst")?);
    let mut out = Vec::new();
    for (gi, &g) in gids.iter().enumerate() {
        let er = e_rows.get(&g).ok_or("edges")?;
        let src: Vec<u32> = er.iter().map(|&i| esrc[i] as u32).collect();
        let dst: Vec<u32> = er.iter().map(|&i| edst[i] as u32).collect();
        out.push((g, Adjacency::from_edges(ns[gi] as usize, &src, &dst, false)?));
    }
    Ok(out)
}

#[test]
fn graphwave_exact_matches_fixture() -> TestResult {
    let Some(dir) = fixture("graphwave") else { return Ok(()) };
    let emb = tgrag_schemas::io::read_parquet(&dir.join("embeddings.parquet"))?;
    let (w_rows, wnode) = (rows_by_graph(&emb)?, i64s(&emb, "node")?);
    let ts = sample_points(25, 100.0);
    let mut worst: f64 = 0.0;
    for (g, adj) in graphwave_graphs(&dir)? {
        let got = embed(&adj, &[0.5, 1.0, 3.0], &ts, Mode::Exact)?;
        let rows = w_rows.get(&g).ok_or("embeddings")?;
        let (want, width) = block(&emb, "f", rows)?;
        assert_eq!(width, 150);
        for (k, &i) in rows.iter().enumerate() {
            let node = wnode[i] as usize;
            for c in 0..width {
                let err = (got[node * width + c] - want[k * width + c]).abs();
                worst = worst.max(err);
                assert!(err <= 1e-8, "graph {g} node {node} f{c:03}: {} vs {}", got[node * width + c], want[k * width + c]);
            }
        }
    }
    eprintln!("graphwave fixture: max abs difference {worst:e}");
    Ok(())
}

#[test]
fn graphwave_chebyshev_error_against_exact_on_fixture_graphs() -> TestResult {
    let Some(dir) = fixture("graphwave") else { return Ok(()) };
    let ts = sample_points(25, 100.0);
    for (g, adj) in graphwave_graphs(&dir)? {
        let n = adj.n;
        let exact = embed(&adj, &[0.5, 1.0, 3.0], &ts, Mode::Exact)?;
        let cheb = embed(&adj, &[0.5, 1.0, 3.0], &ts, crate::toporag::graphwave::DEFAULT_CHEBYSHEV)?;
        let err = exact.iter().zip(&cheb).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        eprintln!("graph {g} (N = {n}): Chebyshev (default tolerance) max abs error {err:.2e}");
        assert!(err < 1e-6, "graph {g}: {err:e}");
    }
    Ok(())
}

#[test]
fn fixture_columns_are_all_finite() -> TestResult {
    let Some(dir) = fixture("graphwave") else { return Ok(()) };
    let emb = tgrag_schemas::io::read_parquet(&dir.join("embeddings.parquet"))?;
    assert!(emb.columns().iter().all(|c| c.null_count() == 0));
    Ok(())
}
