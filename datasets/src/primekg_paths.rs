//! PrimeKG × DrugMechDB mechanism paths (`benchmark_pathways_{nodes,edges,metadata}.csv`): a tiny real
//! typed KB whose node ids are PrimeKG `node_index` values (= STaRK-Prime ids), and gold multi-hop
//! drug → … → disease paths.
//!
//! Nodes keep `node_index` as `node_id` (sorted). A node's name is its first name in the nodes file;
//! its document lists every name DrugMechDB gives it. Edges are the distinct
//! `(source_index, target_index, relation)` triples in file order.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use crate::DatasetTables;
use crate::error::{DatasetError, Result};
use crate::raw::{Csv, Tables, strs, u32s};
use tgrag_schemas::tables;

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub index: u32,
    pub node_type: String,
    pub names: Vec<String>,
}

/// One gold path: its id and node indices by step order.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldPath {
    pub pathway_id: String,
    pub nodes: Vec<u32>,
    pub relations: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Pathways {
    pub nodes: BTreeMap<u32, Node>,
    pub edges: Vec<(u32, u32, String)>,
    pub paths: Vec<GoldPath>,
    pub node_rows: usize,
    pub edge_rows: usize,
    pub metadata_rows: usize,
    dir: PathBuf,
}

impl Pathways {
    pub fn load(dir: &Path) -> Result<Self> {
        let np = dir.join("benchmark_pathways_nodes.csv");
        let n = Csv::read(&np)?;
        let (cp, cs, cn, ct, ci) =
            (n.col("pathway_id")?, n.col("step_order")?, n.col("node_name")?, n.col("node_type")?, n.col("node_index")?);
        let mut nodes: BTreeMap<u32, Node> = BTreeMap::new();
        let mut steps: BTreeMap<String, Vec<(u32, u32)>> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for r in 0..n.rows.len() {
            let (idx, step): (u32, u32) = (n.int(r, ci)?, n.int(r, cs)?);
            let row = &n.rows[r];
            let node = nodes.entry(idx).or_insert_with(|| Node { index: idx, node_type: row[ct].clone(), names: Vec::new() });
            if node.node_type != row[ct] {
                return Err(DatasetError::malformed(
                    &np,
                    format!("row {r}, column node_type"),
                    format!("node {idx} is `{}` here and `{}` before", crate::raw::quote(&row[ct]), crate::raw::quote(&node.node_type)),
                ));
            }
            if !node.names.contains(&row[cn]) {
                node.names.push(row[cn].clone());
            }
            if !steps.contains_key(&row[cp]) {
                order.push(row[cp].clone());
            }
            steps.entry(row[cp].clone()).or_default().push((step, idx));
        }
        let ep = dir.join("benchmark_pathways_edges.csv");
        let e = Csv::read(&ep)?;
        let (ep_id, es, et, er, ef) =
            (e.col("pathway_id")?, e.col("source_index")?, e.col("target_index")?, e.col("relation")?, e.col("step_from")?);
        let mut seen = HashSet::new();
        let mut edges = Vec::new();
        let mut rels: BTreeMap<String, Vec<(u32, String)>> = BTreeMap::new();
        for r in 0..e.rows.len() {
            let (s, d, from): (u32, u32, u32) = (e.int(r, es)?, e.int(r, et)?, e.int(r, ef)?);
            for (v, c) in [(s, "source_index"), (d, "target_index")] {
                if !nodes.contains_key(&v) {
                    return Err(DatasetError::malformed(
                        &ep,
                        format!("row {r}, column {c}"),
                        format!("node {v} is not in {}", np.display()),
                    ));
                }
            }
            let rel = e.rows[r][er].clone();
            rels.entry(e.rows[r][ep_id].clone()).or_default().push((from, rel.clone()));
            if seen.insert((s, d, rel.clone())) {
                edges.push((s, d, rel));
            }
        }
        let paths = order
            .into_iter()
            .map(|id| {
                let mut st = steps.remove(&id).unwrap_or_default();
                st.sort_by_key(|x| x.0);
                let mut rs = rels.remove(&id).unwrap_or_default();
                rs.sort_by_key(|x| x.0);
                GoldPath { pathway_id: id, nodes: st.into_iter().map(|x| x.1).collect(), relations: rs.into_iter().map(|x| x.1).collect() }
            })
            .collect();
        let mp = dir.join("benchmark_pathways_metadata.csv");
        let m = Csv::read(&mp)?;
        m.col("pathway_id")?;
        Ok(Pathways {
            nodes,
            edges,
            paths,
            node_rows: n.rows.len(),
            edge_rows: e.rows.len(),
            metadata_rows: m.rows.len(),
            dir: dir.to_path_buf(),
        })
    }

    /// `nodes` and `edges` of the typed KB (node ids are PrimeKG `node_index`).
    pub fn to_tables(&self) -> Result<DatasetTables> {
        let mut t = Tables::new();
        let src = self.dir.join("benchmark_pathways_nodes.csv");
        let v: Vec<&Node> = self.nodes.values().collect();
        t.push(
            &tables::NODES,
            &src,
            vec![
                u32s(v.iter().map(|n| n.index)),
                strs(v.iter().map(|n| n.node_type.as_str())),
                strs(v.iter().map(|n| n.names.first().map_or("", String::as_str))),
                strs(v.iter().map(|n| format!("- name: {}\n- type: {}\n", n.names.join("; "), n.node_type))),
            ],
        )?;
        let esrc = self.dir.join("benchmark_pathways_edges.csv");
        t.push(
            &tables::EDGES,
            &esrc,
            vec![u32s(self.edges.iter().map(|e| e.0)), u32s(self.edges.iter().map(|e| e.1)), strs(self.edges.iter().map(|e| e.2.as_str()))],
        )?;
        Ok(t.finish())
    }
}
