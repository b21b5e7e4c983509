//! A synthetic scene-graph QA set (GQA/SceneGraphs-like): small textual graphs of objects with
//! spatial relations, and questions whose answers follow from the graph.

use crate::rng::Rng;

const OBJECTS: &[&str] =
    &["cube", "sphere", "cylinder", "chair", "table", "dog", "cat", "lamp", "book", "cup", "bottle", "car", "tree", "bench", "bicycle"];
const COLORS: &[&str] = &["red", "blue", "green", "yellow", "gray", "brown", "purple", "white"];
const MATERIALS: &[&str] = &["metal", "rubber", "wooden", "glass", "plastic"];
const SIZES: &[&str] = &["small", "large"];
const RELATIONS: &[&str] = &["left of", "right of", "in front of", "behind", "on top of", "next to"];

/// One graph with its question.
pub struct SceneGraph {
    pub nodes: Vec<String>,
    pub edges: Vec<(u32, u32, &'static str)>,
    pub question: String,
    pub answer: String,
}

struct Obj {
    size: &'static str,
    color: &'static str,
    material: &'static str,
    kind: &'static str,
}

fn make(rng: &mut Rng) -> Option<SceneGraph> {
    let n = rng.range(4, 9);
    let objs: Vec<Obj> = (0..n)
        .map(|_| Obj { size: rng.word(SIZES), color: rng.word(COLORS), material: rng.word(MATERIALS), kind: rng.word(OBJECTS) })
        .collect();
    let mut edges = Vec::new();
    for i in 1..n {
        let j = rng.below(i);
        let (a, b) = if rng.chance(0.5) { (i, j) } else { (j, i) };
        edges.push((a as u32, b as u32, rng.word(RELATIONS)));
    }
    for _ in 0..rng.below(n) {
        let (a, b) = (rng.below(n), rng.below(n));
        let r = rng.word(RELATIONS);
        if a != b && !edges.iter().any(|&(x, y, _)| (x, y) == (a as u32, b as u32)) {
            edges.push((a as u32, b as u32, r));
        }
    }
    let nodes: Vec<String> = objs.iter().map(|o| format!("{} {} {} {}", o.size, o.color, o.material, o.kind)).collect();
    let (question, answer) = if rng.chance(0.5) {
        // "What color is the object that is <rel> the <color kind>?" — needs a unique reference object
        // and a unique subject for that relation.
        let &(a, b, r) = rng.pick(&edges)?;
        let ob = &objs[b as usize];
        let unique_ref = objs.iter().filter(|o| o.color == ob.color && o.kind == ob.kind).count() == 1;
        let unique_subj = edges.iter().filter(|&&(_, y, rr)| y == b && rr == r).count() == 1;
        if !(unique_ref && unique_subj) {
            return None;
        }
        (format!("What color is the object that is {r} the {} {}?", ob.color, ob.kind), objs[a as usize].color.to_string())
    } else {
        let c = rng.word(COLORS);
        let k = objs.iter().filter(|o| o.color == c).count();
        (format!("How many {c} objects are there?"), k.to_string())
    };
    Some(SceneGraph { nodes, edges, question, answer })
}

/// `n` graphs with one question each.
pub fn generate(n: usize, seed: u64) -> Vec<SceneGraph> {
    (0..n)
        .map(|i| {
            let mut rng = Rng::for_item(seed, "graphqa", i as u64);
            loop {
                if let Some(g) = make(&mut rng) {
                    return g;
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_derivable_from_the_graph() {
        for g in generate(200, 4) {
            if let Some(color) = g.question.strip_prefix("How many ").and_then(|s| s.split(' ').next()) {
                let k = g.nodes.iter().filter(|t| t.split(' ').nth(1) == Some(color)).count();
                assert_eq!(g.answer, k.to_string());
            } else {
                let subject = g.edges.iter().find(|&&(a, b, r)| {
                    let t = &g.nodes[b as usize];
                    let (c, kind) = (t.split(' ').nth(1).unwrap_or(""), t.split(' ').nth(3).unwrap_or(""));
                    g.question.contains(&format!("{r} the {c} {kind}?")) && g.nodes[a as usize].contains(g.answer.as_str())
                });
                assert!(subject.is_some(), "{} -> {}", g.question, g.answer);
            }
            assert!(g.edges.iter().all(|&(a, b, _)| (a as usize) < g.nodes.len() && (b as usize) < g.nodes.len()));
        }
    }
}
