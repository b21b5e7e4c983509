//! A synthetic text-attributed graph: citation-like, class-homophilous, chronological, with class
//! vocabularies so that text similarity and topology are correlated (as TopoRAG §4 observes on real
//! graphs).

use crate::rng::Rng;

/// (label, topic words)
const CLASSES: &[(&str, &[&str])] = &[
    (
        "Neural_Networks",
        &[
            "neural",
            "network",
            "layer",
            "activation",
            "backpropagation",
            "weights",
            "hidden",
            "perceptron",
            "training",
            "gradient",
            "recurrent",
            "convolutional",
            "neurons",
            "epochs",
            "dropout",
        ],
    ),
    (
        "Genetic_Algorithms",
        &[
            "genetic",
            "mutation",
            "crossover",
            "population",
            "fitness",
            "evolutionary",
            "chromosome",
            "selection",
            "offspring",
            "generations",
            "genome",
            "breeding",
            "schema",
            "elitism",
            "encoding",
        ],
    ),
    (
        "Reinforcement_Learning",
        &[
            "reward",
            "agent",
            "policy",
            "environment",
            "action",
            "state",
            "value",
            "exploration",
            "q-learning",
            "temporal",
            "episode",
            "bandit",
            "markov",
            "return",
            "discount",
        ],
    ),
    (
        "Probabilistic_Methods",
        &[
            "bayesian",
            "probability",
            "posterior",
            "prior",
            "likelihood",
            "inference",
            "sampling",
            "distribution",
            "belief",
            "markov",
            "variational",
            "latent",
            "gaussian",
            "evidence",
            "graphical",
        ],
    ),
    (
        "Rule_Learning",
        &[
            "rules",
            "induction",
            "clauses",
            "logic",
            "decision",
            "hypothesis",
            "attributes",
            "covering",
            "pruning",
            "relational",
            "predicates",
            "examples",
            "concept",
            "boolean",
            "horn",
        ],
    ),
    (
        "Case_Based",
        &[
            "case",
            "retrieval",
            "similarity",
            "memory",
            "adaptation",
            "reuse",
            "cases",
            "analogy",
            "indexing",
            "precedent",
            "experience",
            "library",
            "matching",
            "reasoning",
            "episodes",
        ],
    ),
];

const GENERAL: &[&str] = &[
    "we",
    "propose",
    "method",
    "approach",
    "results",
    "show",
    "paper",
    "present",
    "novel",
    "using",
    "based",
    "problem",
    "performance",
    "experiments",
    "data",
    "model",
    "algorithm",
    "efficient",
    "analysis",
    "framework",
    "task",
    "improve",
    "compare",
    "study",
    "learning",
    "system",
    "new",
    "describe",
    "evaluate",
    "real",
    "world",
    "large",
    "applications",
    "demonstrate",
    "technique",
    "significant",
    "accuracy",
    "empirical",
    "theoretical",
    "several",
    "domains",
    "benchmark",
];

/// One generated text-attributed node.
pub struct TagNode {
    pub text: String,
    pub label: &'static str,
    pub time: i64,
    pub partial: bool,
}

/// Nodes and undirected edges (each stored once, newer → older).
pub struct Tag {
    pub nodes: Vec<TagNode>,
    pub edges: Vec<(u32, u32)>,
}

fn sentence(rng: &mut Rng, class_words: &[&str]) -> String {
    let n = rng.range(8, 14);
    let words: Vec<&str> = (0..n).map(|_| if rng.chance(0.6) { rng.word(class_words) } else { rng.word(GENERAL) }).collect();
    let mut s = words.join(" ");
    if let Some(c) = s.get_mut(0..1) {
        c.make_ascii_uppercase();
    }
    s.push('.');
    s
}

/// Generates `n` nodes; the newest 10% (by time) are marked partially observed.
pub fn generate(n: usize, seed: u64) -> Tag {
    let mut nodes = Vec::with_capacity(n);
    let mut by_class: Vec<Vec<u32>> = vec![Vec::new(); CLASSES.len()];
    let mut edges = Vec::new();
    for i in 0..n {
        let mut rng = Rng::for_item(seed, "tag", i as u64);
        let c = rng.below(CLASSES.len());
        let (label, words) = CLASSES[c];
        let text: Vec<String> = (0..rng.range(3, 8)).map(|_| sentence(&mut rng, words)).collect();
        let time = 1995 + (i * 25 / n.max(1)) as i64;
        // Cite up to 5 older nodes, 80% of them from the same class.
        if i > 0 {
            let m = rng.range(1, 5).min(i);
            let mut cited: Vec<u32> = Vec::with_capacity(m);
            let mut guard = 0;
            while cited.len() < m && guard < 50 {
                guard += 1;
                let same = &by_class[c];
                let j = if rng.chance(0.8) && !same.is_empty() { same[rng.below(same.len())] } else { rng.below(i) as u32 };
                if !cited.contains(&j) {
                    cited.push(j);
                }
            }
            edges.extend(cited.into_iter().map(|j| (i as u32, j)));
        }
        by_class[c].push(i as u32);
        nodes.push(TagNode { text: text.join(" "), label, time, partial: false });
    }
    let cut = n - n / 10;
    for node in nodes.iter_mut().skip(cut) {
        node.partial = true;
    }
    Tag { nodes, edges }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_are_homophilous_and_point_back_in_time() {
        let g = generate(600, 1);
        assert!(g.edges.iter().all(|&(a, b)| b < a));
        let same = g.edges.iter().filter(|&&(a, b)| g.nodes[a as usize].label == g.nodes[b as usize].label).count();
        assert!(same * 10 > g.edges.len() * 7, "{same} of {}", g.edges.len());
        assert_eq!(g.nodes.iter().filter(|n| n.partial).count(), 60);
        // The partially observed nodes are the newest.
        let min_partial = g.nodes.iter().filter(|n| n.partial).map(|n| n.time).min();
        let max_observed = g.nodes.iter().filter(|n| !n.partial).map(|n| n.time).max();
        assert!(min_partial >= max_observed);
    }
}
