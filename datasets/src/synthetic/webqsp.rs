//! A synthetic WebQSP-like set: per question a Freebase-style subgraph around its topic entity (RoG
//! and G-Retriever's WebQSP graphs: ~1,000 entities and ~4,000 triples, lower-cased entity names,
//! dotted relation names that repeat many times), and a 1- or 2-hop question whose answers are
//! entities of the graph (often several). Entity names come from one seeded pool, so the same
//! entity appears in many graphs, as in Freebase.

use std::collections::{BTreeSet, HashMap};

use crate::rng::Rng;

/// Relations: (Freebase-style name, the phrase a question uses for it).
const RELATIONS: &[(&str, &str)] = &[
    ("people.person.place_of_birth", "where was {} born"),
    ("people.person.nationality", "what is the nationality of {}"),
    ("people.person.spouse_s", "who is the spouse of {}"),
    ("people.person.children", "who are the children of {}"),
    ("people.person.profession", "what is the profession of {}"),
    ("people.person.education", "where did {} study"),
    ("people.person.languages", "what languages does {} speak"),
    ("location.location.contains", "what places does {} contain"),
    ("location.location.containedby", "what region contains {}"),
    ("location.country.capital", "what is the capital of {}"),
    ("location.country.official_language", "what is the official language of {}"),
    ("location.country.currency_used", "what currency is used in {}"),
    ("film.film.directed_by", "who directed {}"),
    ("film.film.starring", "who starred in {}"),
    ("film.film.genre", "what genre is {}"),
    ("film.actor.film", "what films did {} act in"),
    ("music.artist.genre", "what kind of music does {} play"),
    ("music.artist.album", "what albums did {} release"),
    ("organization.organization.founders", "who founded {}"),
    ("organization.organization.headquarters", "where are the headquarters of {}"),
    ("sports.sports_team.location", "where is {} based"),
    ("sports.sports_team.championships", "what championships did {} win"),
    ("government.politician.party", "what party does {} belong to"),
    ("book.author.works_written", "what books did {} write"),
    ("common.topic.notable_types", "what type of thing is {}"),
    ("base.biography.parents", "who are the parents of {}"),
];

/// Syllables of the entity-name pool.
const SYLLABLES: &[&str] = &[
    "ka", "ren", "mo", "li", "tor", "va", "sel", "dun", "ar", "bel", "cor", "dra", "el", "fen", "gal", "hor", "is", "jor", "kel", "lun",
    "mar", "nor", "os", "pel", "quin", "ros", "sa", "tal", "ul", "ver", "wen", "xan", "yor", "zel",
];

/// One question with its graph: node texts (ids = positions), `(src, relation, dst)` triples, the
/// question, the answers' node ids and the number of hops.
pub struct WebQspGraph {
    pub nodes: Vec<String>,
    pub edges: Vec<(u32, u32, &'static str)>,
    pub question: String,
    pub answers: Vec<u32>,
    pub hops: u8,
}

impl WebQspGraph {
    /// G-Retriever's label: the answer names joined by `|`.
    pub fn label(&self) -> String {
        self.answers.iter().map(|&a| self.nodes[a as usize].as_str()).collect::<Vec<_>>().join("|")
    }
}

/// The entity-name pool: `n` distinct lower-cased two- or three-word names.
fn pool(n: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng::for_item(seed, "webqsp-names", 0);
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let word = |rng: &mut Rng| (0..rng.range(2, 4)).map(|_| rng.word(SYLLABLES)).collect::<String>();
        let name = if rng.chance(0.3) {
            format!("{} {} {}", word(&mut rng), word(&mut rng), word(&mut rng))
        } else {
            format!("{} {}", word(&mut rng), word(&mut rng))
        };
        if seen.insert(name.clone()) {
            out.push(name);
        }
    }
    out
}

/// One question graph of about `n_nodes` entities and `4·n_nodes` triples.
fn make(rng: &mut Rng, names: &[String], n_nodes: usize) -> WebQspGraph {
    // Entities of this graph: distinct draws from the pool.
    let ids = rng.sample_distinct(names.len(), n_nodes.min(names.len()));
    let nodes: Vec<String> = ids.iter().map(|&i| names[i].clone()).collect();
    let n = nodes.len();
    let topic = 0u32;
    let mut edges: Vec<(u32, u32, &'static str)> = Vec::new();
    let mut seen: HashMap<(u32, u32, &str), ()> = HashMap::new();
    let mut add = |edges: &mut Vec<(u32, u32, &'static str)>, s: u32, d: u32, r: &'static str| {
        if s != d && seen.insert((s, d, r), ()).is_none() {
            edges.push((s, d, r));
        }
    };
    // The answer structure first: 1 hop (topic -r1-> answers) or 2 hops (topic -r1-> bridge -r2-> answers).
    let hops = if rng.chance(0.5) { 1u8 } else { 2 };
    let r1 = rng.below(RELATIONS.len());
    let r2 = (r1 + 1 + rng.below(RELATIONS.len() - 1)) % RELATIONS.len();
    let n_ans = 1 + rng.below(4);
    let mut next = 1u32;
    let mut take = |k: usize| -> Vec<u32> {
        let v: Vec<u32> = (next..next + k as u32).collect();
        next += k as u32;
        v
    };
    let answers = if hops == 1 {
        let a = take(n_ans);
        for &x in &a {
            add(&mut edges, topic, x, RELATIONS[r1].0);
        }
        a
    } else {
        let bridge = take(1)[0];
        add(&mut edges, topic, bridge, RELATIONS[r1].0);
        let a = take(n_ans);
        for &x in &a {
            add(&mut edges, bridge, x, RELATIONS[r2].0);
        }
        a
    };
    // Distractors: the topic's other relations (never r1 for 1 hop, so answers stay exact), and a
    // dense random neighbourhood whose relation names repeat.
    for _ in 0..rng.range(5, 15) {
        let r = rng.below(RELATIONS.len());
        if r == r1 {
            continue;
        }
        let d = 1 + rng.below(n - 1) as u32;
        if !answers.contains(&d) {
            add(&mut edges, topic, d, RELATIONS[r].0);
        }
    }
    let target = 4 * n;
    let mut guard = 0;
    while edges.len() < target && guard < 20 * target {
        guard += 1;
        let (s, d) = (rng.below(n) as u32, rng.below(n) as u32);
        let r = rng.below(RELATIONS.len());
        // Keep the question's answers exact: no other edge may reach the answer set by the
        // question's path (no extra topic -r1->, no extra bridge -r2->), and the topic is only
        // touched above.
        if s == topic || d == topic {
            continue;
        }
        if hops == 2 && s == 1 && r == r2 {
            continue;
        }
        add(&mut edges, s, d, RELATIONS[r].0);
    }
    let phrase = if hops == 1 {
        RELATIONS[r1].1.replace("{}", &nodes[topic as usize])
    } else {
        // "where was the director of X born": the bridge phrase as a noun, then the outer relation.
        let bridge = RELATIONS[r1].0.rsplit('.').next().unwrap_or("").replace('_', " ");
        RELATIONS[r2].1.replace("{}", &format!("the {bridge} of {}", nodes[topic as usize]))
    };
    WebQspGraph { nodes, edges, question: format!("{phrase}?"), answers, hops }
}

/// `n` question graphs of about `n_nodes` entities each (from a pool of `8·n_nodes` names).
pub fn generate(n: usize, n_nodes: usize, seed: u64) -> Vec<WebQspGraph> {
    let names = pool((8 * n_nodes).max(64), seed);
    (0..n).map(|i| make(&mut Rng::for_item(seed, "webqsp", i as u64), &names, n_nodes)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_follow_from_the_graph_and_graphs_have_webqsp_sizes() {
        let gs = generate(30, 250, 5);
        for g in &gs {
            let n = g.nodes.len() as u32;
            assert!(g.edges.iter().all(|&(s, d, _)| s < n && d < n && s != d));
            assert!((900..=1000).contains(&g.edges.len()), "{} edges", g.edges.len());
            // Follow the question's path from the topic (node 0) and find exactly the answers.
            let rels: Vec<&str> = g.edges.iter().filter(|e| e.0 == 0).map(|e| e.2).collect();
            let mut reached = BTreeSet::new();
            for r1 in rels.iter().copied().collect::<BTreeSet<_>>() {
                let first: Vec<u32> = g.edges.iter().filter(|e| e.0 == 0 && e.2 == r1).map(|e| e.1).collect();
                if g.hops == 1 {
                    if first.iter().copied().collect::<BTreeSet<_>>() == g.answers.iter().copied().collect() {
                        reached = first.into_iter().collect();
                    }
                } else {
                    for b in first {
                        for r2 in g.edges.iter().filter(|e| e.0 == b).map(|e| e.2) {
                            let second: BTreeSet<u32> = g.edges.iter().filter(|e| e.0 == b && e.2 == r2).map(|e| e.1).collect();
                            if second == g.answers.iter().copied().collect() {
                                reached = second;
                            }
                        }
                    }
                }
            }
            assert_eq!(reached, g.answers.iter().copied().collect::<BTreeSet<_>>(), "{}", g.question);
            assert!(g.question.contains(&g.nodes[0]), "the question names its topic entity");
            assert_eq!(g.label().split('|').count(), g.answers.len());
        }
        assert!(gs.iter().any(|g| g.hops == 1) && gs.iter().any(|g| g.hops == 2));
        assert!(gs.iter().any(|g| g.answers.len() > 1));
        // Names repeat across graphs (one pool), relation names repeat within a graph.
        let first: BTreeSet<&String> = gs[0].nodes.iter().collect();
        assert!(gs[1].nodes.iter().any(|n| first.contains(n)));
        let rels: BTreeSet<&str> = gs[0].edges.iter().map(|e| e.2).collect();
        assert!(rels.len() <= RELATIONS.len() && gs[0].edges.len() > 10 * rels.len());
        // Seeded.
        let again = generate(30, 250, 5);
        assert_eq!(gs[3].edges, again[3].edges);
    }
}
