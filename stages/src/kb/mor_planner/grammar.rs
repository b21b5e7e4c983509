//! The plan grammar: a plan's metapaths as decoder tokens (per path its node types and hops: `->`,
//! `<-`, or `-relation->` for Prime's lists; `|` between paths) and back, and plans rendered in
//! the syntax of MoR's plan files ([`PlanSyntax`]).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use tgrag_datasets::mor_plans::{Dir, Metapath, Plan, PlanLine};

use crate::{Result, StageError};

/// One produced plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Produced {
    /// The metapaths, in order (none when the planner gave no plan).
    pub paths: Vec<Metapath>,
    /// The restrictions: (node type, texts), types sorted.
    pub restriction_spans: Vec<(String, Vec<String>)>,
    /// `paths` in MoR syntax ([`PlanSyntax`]): `a -> b <- c` (several paths joined by `, `) or
    /// Prime's JSON list of lists; empty when the planner gave no plan.
    pub metapath: String,
    /// `restriction_spans` as JSON `{type: [text, …]}` (types sorted).
    pub restrictions: String,
    /// The decoder's tokens did not alternate type and hop, so no plan was produced (counted in
    /// [`Figures::malformed`](super::Figures::malformed); MoR treats it as its empty plan).
    pub malformed: bool,
}

fn hop_token(rel: &Option<String>, dir: Dir) -> String {
    match (rel, dir) {
        (Some(r), Dir::Forward) => format!("-{r}->"),
        (Some(r), Dir::Backward) => format!("<-{r}-"),
        (None, Dir::Forward) => "->".into(),
        (None, Dir::Backward) => "<-".into(),
    }
}

/// The token sequence of a plan's metapaths.
pub fn plan_tokens(paths: &[Metapath]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        if i > 0 {
            out.push("|".to_string());
        }
        for (k, t) in p.types.iter().enumerate() {
            if k > 0 {
                out.push(hop_token(&p.hops[k - 1].0, p.hops[k - 1].1));
            }
            out.push(t.clone());
        }
    }
    out
}

fn parse_hop(tok: &str) -> Option<(Option<String>, Dir)> {
    match tok {
        "->" => Some((None, Dir::Forward)),
        "<-" => Some((None, Dir::Backward)),
        _ if tok.len() > 3 && tok.starts_with('-') && tok.ends_with("->") => Some((Some(tok[1..tok.len() - 2].to_string()), Dir::Forward)),
        _ if tok.len() > 3 && tok.starts_with("<-") && tok.ends_with('-') => Some((Some(tok[2..tok.len() - 1].to_string()), Dir::Backward)),
        _ => None,
    }
}

/// Metapaths from tokens; `None` when the sequence does not alternate type / hop / type.
pub fn tokens_to_paths(tokens: &[String]) -> Option<Vec<Metapath>> {
    if tokens.is_empty() {
        return Some(Vec::new());
    }
    tokens
        .split(|t| t == "|")
        .map(|seg| {
            if seg.len() % 2 == 0 {
                return None;
            }
            let mut p = Metapath { types: Vec::new(), hops: Vec::new() };
            for (k, t) in seg.iter().enumerate() {
                if k % 2 == 0 {
                    if t == "|" || parse_hop(t).is_some() {
                        return None;
                    }
                    p.types.push(t.clone());
                } else {
                    p.hops.push(parse_hop(t)?);
                }
            }
            Some(p)
        })
        .collect()
}

/// How MoR's plan files write a metapath: `model.json`'s `syntax`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanSyntax {
    /// Amazon's and MAG's strings: `a -> b <- c`, several paths joined by `, `.
    Arrow,
    /// Prime's JSON list of lists: `[[type, relation, type, …], …]`.
    Lists,
}

/// Renders metapaths in MoR's syntax; paths in the given order.
pub fn render_metapath(paths: &[Metapath], syntax: PlanSyntax) -> Result<String> {
    if paths.is_empty() {
        return Ok(String::new());
    }
    if syntax == PlanSyntax::Lists {
        let lists: Vec<Vec<String>> = paths
            .iter()
            .map(|p| {
                let mut v = vec![p.types[0].clone()];
                for (k, (r, _)) in p.hops.iter().enumerate() {
                    v.push(r.clone().unwrap_or_default());
                    v.push(p.types[k + 1].clone());
                }
                v
            })
            .collect();
        serde_json::to_string(&lists).map_err(|e| StageError::Internal(format!("metapath as JSON: {e}")))
    } else {
        Ok(paths.iter().map(Metapath::to_mor_string).collect::<Vec<_>>().join(", "))
    }
}

/// A plan as produced: the typed paths and restrictions, and both rendered as MoR writes them.
pub(super) fn produced(
    paths: Vec<Metapath>,
    restriction_spans: Vec<(String, Vec<String>)>,
    syntax: PlanSyntax,
    malformed: bool,
) -> Result<Produced> {
    Ok(Produced {
        metapath: render_metapath(&paths, syntax)?,
        restrictions: render_restrictions(&restriction_spans)?,
        paths,
        restriction_spans,
        malformed,
    })
}

fn render_restrictions(r: &[(String, Vec<String>)]) -> Result<String> {
    let m: BTreeMap<&str, &Vec<String>> = r.iter().map(|(k, v)| (k.as_str(), v)).collect();
    serde_json::to_string(&m).map_err(|e| StageError::Internal(format!("restrictions as JSON: {e}")))
}

/// The gold plan of a line: parsed, or the empty plan for MoR's `''`; `None` for other rejections.
pub(super) fn gold_plan(l: &PlanLine) -> Option<Plan> {
    match &l.plan {
        Ok(p) => Some(p.clone()),
        Err(e) if e.starts_with("empty Metapath") => Some(Plan { metapaths: Vec::new(), restrictions: Vec::new() }),
        Err(_) => None,
    }
}

pub(super) fn plan_tokens_of(p: &Plan) -> Vec<String> {
    plan_tokens(&p.metapaths)
}

pub(super) fn plan_types(p: &Plan, type_id: &HashMap<String, u32>) -> Vec<u32> {
    let mut v: Vec<u32> = p.metapaths.iter().flat_map(|m| m.types.iter()).filter_map(|t| type_id.get(t).copied()).collect();
    v.sort_unstable();
    v.dedup();
    v
}
