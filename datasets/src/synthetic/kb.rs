//! The synthetic knowledge base: twelve entity types in three domains, sixteen typed relations with
//! community structure, STaRK-style documents, and templated 1–3 hop queries with a text restriction
//! whose answers are computed from the graph.

use std::collections::HashSet;

use rayon::prelude::*;

use super::vocab::*;
use crate::rng::Rng;

/// Entity types, in node-id order.
pub const TYPES: &[&str] =
    &["product", "brand", "category", "color", "paper", "author", "institution", "field", "drug", "disease", "gene", "pathway"];
const PRODUCT: usize = 0;
const BRAND: usize = 1;
const CATEGORY: usize = 2;
const COLOR: usize = 3;
const PAPER: usize = 4;
const AUTHOR: usize = 5;
const INSTITUTION: usize = 6;
const FIELD: usize = 7;
const DRUG: usize = 8;
const DISEASE: usize = 9;
const GENE: usize = 10;
const PATHWAY: usize = 11;

/// Node counts at STaRK-Prime scale (≈130k nodes) and the minimum at any scale.
const PRIME_COUNTS: [(usize, usize); 12] = [
    (30_000, 40),
    (1_500, 6),
    (400, 8),
    (24, 24),
    (30_000, 40),
    (25_000, 40),
    (1_200, 6),
    (300, 8),
    (8_000, 20),
    (12_000, 30),
    (20_000, 40),
    (1_500, 6),
];

/// A relation: name, source type, destination type, how edges are drawn.
struct RelSpec {
    name: &'static str,
    src: usize,
    dst: usize,
    draw: Draw,
}

enum Draw {
    /// Each source node draws `lo..=hi` distinct destinations; the first is its group when
    /// `first_is_group` (primary category, field, pathway).
    PerSource { lo: usize, hi: usize, first_is_group: bool },
    /// Each destination node draws `lo..=hi` sources (e.g. a paper draws its authors), preferring
    /// sources of the same group with probability `same_group`.
    PerDestination { lo: usize, hi: usize, same_group: f64 },
    /// Dense same-type relation: about `prime_degree` (scaled by √scale) destinations per source,
    /// from the same group with probability `same_group`.
    Dense { prime_degree: usize, same_group: f64 },
}

const RELATIONS: &[RelSpec] = &[
    RelSpec { name: "has_brand", src: PRODUCT, dst: BRAND, draw: Draw::PerSource { lo: 1, hi: 1, first_is_group: false } },
    RelSpec { name: "has_category", src: PRODUCT, dst: CATEGORY, draw: Draw::PerSource { lo: 1, hi: 2, first_is_group: true } },
    RelSpec { name: "has_color", src: PRODUCT, dst: COLOR, draw: Draw::PerSource { lo: 1, hi: 2, first_is_group: false } },
    RelSpec { name: "also_bought", src: PRODUCT, dst: PRODUCT, draw: Draw::Dense { prime_degree: 40, same_group: 0.7 } },
    RelSpec { name: "also_viewed", src: PRODUCT, dst: PRODUCT, draw: Draw::Dense { prime_degree: 30, same_group: 0.7 } },
    RelSpec { name: "writes", src: AUTHOR, dst: PAPER, draw: Draw::PerDestination { lo: 2, hi: 6, same_group: 0.7 } },
    RelSpec { name: "affiliated_with", src: AUTHOR, dst: INSTITUTION, draw: Draw::PerSource { lo: 1, hi: 2, first_is_group: false } },
    RelSpec { name: "has_field", src: PAPER, dst: FIELD, draw: Draw::PerSource { lo: 1, hi: 3, first_is_group: true } },
    RelSpec { name: "cites", src: PAPER, dst: PAPER, draw: Draw::Dense { prime_degree: 40, same_group: 0.6 } },
    RelSpec { name: "indication", src: DRUG, dst: DISEASE, draw: Draw::PerSource { lo: 1, hi: 7, first_is_group: false } },
    RelSpec { name: "target", src: DRUG, dst: GENE, draw: Draw::PerSource { lo: 3, hi: 13, first_is_group: false } },
    RelSpec { name: "associated_with", src: GENE, dst: DISEASE, draw: Draw::PerSource { lo: 2, hi: 6, first_is_group: false } },
    RelSpec { name: "in_pathway", src: GENE, dst: PATHWAY, draw: Draw::PerSource { lo: 1, hi: 5, first_is_group: true } },
    RelSpec { name: "ppi", src: GENE, dst: GENE, draw: Draw::Dense { prime_degree: 120, same_group: 0.6 } },
    RelSpec { name: "synergistic_interaction", src: DRUG, dst: DRUG, draw: Draw::Dense { prime_degree: 120, same_group: 0.5 } },
    RelSpec { name: "disease_disease", src: DISEASE, dst: DISEASE, draw: Draw::Dense { prime_degree: 50, same_group: 0.6 } },
];

/// Relation names in relation-id order.
pub fn relation_names() -> Vec<&'static str> {
    RELATIONS.iter().map(|r| r.name).collect()
}

fn rel(name: &str) -> usize {
    RELATIONS.iter().position(|r| r.name == name).unwrap_or(usize::MAX)
}

/// The generated knowledge base, in memory.
pub struct Kb {
    /// First node id of each type, plus the total at the end.
    pub starts: Vec<u32>,
    pub names: Vec<String>,
    pub docs: Vec<String>,
    /// (src, dst, relation id), in generation order.
    pub edges: Vec<(u32, u32, u16)>,
    pub queries: Vec<Query>,
}

/// One generated query.
pub struct Query {
    pub text: String,
    pub pattern: &'static str,
    pub hops: u8,
    pub answers: Vec<u32>,
}

impl Kb {
    /// Type index of a node.
    pub fn type_of(&self, node: u32) -> usize {
        self.starts.partition_point(|&s| s <= node).saturating_sub(1)
    }
}

struct Nodes {
    starts: Vec<u32>,
    names: Vec<String>,
    group: Vec<u32>,
    keywords: Vec<Vec<u16>>,
    /// Members of each group, per type (for group-preferring draws).
    members: Vec<Vec<Vec<u32>>>,
}

impl Nodes {
    fn count(&self, t: usize) -> usize {
        (self.starts[t + 1] - self.starts[t]) as usize
    }
    fn id(&self, t: usize, i: usize) -> u32 {
        self.starts[t] + i as u32
    }
    fn local(&self, t: usize, id: u32) -> usize {
        (id - self.starts[t]) as usize
    }
}

fn keyword_list(t: usize) -> &'static [&'static str] {
    match t {
        PRODUCT => PRODUCT_FEATURES,
        PAPER => PAPER_METHODS,
        DRUG => DRUG_FEATURES,
        DISEASE => SYMPTOMS,
        GENE | PATHWAY => PROCESSES,
        _ => &[],
    }
}

fn keywords_per_node(t: usize) -> usize {
    match t {
        PRODUCT | PAPER | DISEASE => 3,
        DRUG | GENE | PATHWAY => 2,
        _ => 0,
    }
}

/// Distinct names drawn by `make`; repeated draws get a roman-numeral suffix after a few retries.
fn unique_names(n: usize, rng: &mut Rng, mut make: impl FnMut(&mut Rng, usize) -> String) -> Vec<String> {
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut name = make(rng, i);
        let mut tries = 0;
        while seen.contains(&name) && tries < 12 {
            name = make(rng, i);
            tries += 1;
        }
        let base = name.clone();
        let mut k = 2;
        while seen.contains(&name) {
            name = format!("{base} {}", roman(k));
            k += 1;
        }
        seen.insert(name.clone());
        out.push(name);
    }
    out
}

fn roman(mut n: usize) -> String {
    const T: &[(usize, &str)] = &[
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ];
    let mut s = String::new();
    for &(v, r) in T {
        while n >= v {
            s.push_str(r);
            n -= v;
        }
    }
    s
}

/// Enumerated combinations `a × b` in a seeded order (for category, field, institution, pathway names).
fn combos(rng: &mut Rng, n: usize, parts: &[Vec<String>]) -> Vec<String> {
    let mut all: Vec<String> = vec![String::new()];
    for p in parts {
        all = all.iter().flat_map(|prefix| p.iter().map(move |x| format!("{prefix}{x}"))).collect();
    }
    rng.shuffle(&mut all);
    let mut out: Vec<String> = Vec::with_capacity(n);
    for i in 0..n {
        let base = &all[i % all.len()];
        out.push(if i < all.len() { base.clone() } else { format!("{base} {}", roman(i / all.len() + 1)) });
    }
    out
}

fn strings(xs: &[&str]) -> Vec<String> {
    xs.iter().map(|s| s.to_string()).collect()
}

fn title_case(s: &str) -> String {
    s.split(' ')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn make_nodes(scale: f64, seed: u64) -> Nodes {
    let counts: Vec<usize> = PRIME_COUNTS.iter().map(|&(prime, min)| ((prime as f64 * scale).round() as usize).max(min)).collect();
    let mut starts = vec![0u32];
    for c in &counts {
        let last = *starts.last().unwrap_or(&0);
        starts.push(last + *c as u32);
    }
    let mut rng = Rng::for_item(seed, "names", 0);
    let vocab = VocabularyNames::draw(&counts, &mut rng);
    // Groups first: they steer names (a product's noun is its primary category's) and edges.
    let (group, keywords) = draw_groups(&counts, &starts, seed);
    let entities = EntityNames::draw(&counts, &starts, &group, &keywords, &vocab, &mut rng);

    let VocabularyNames { categories, brands, colors, fields, institutions, pathways } = vocab;
    let EntityNames { products, papers, authors, drugs, diseases, genes } = entities;
    let mut names = Vec::with_capacity(group.len());
    for list in [products, brands, categories, colors, papers, authors, institutions, fields, drugs, diseases, genes, pathways] {
        names.extend(list);
    }
    let members = group_members(&counts, &starts, &group);
    Nodes { starts, names, group, keywords, members }
}

/// Number of groups of type `t` (categories for products, fields for papers and authors, ...).
fn group_count(counts: &[usize], t: usize) -> usize {
    match t {
        PRODUCT => counts[CATEGORY],
        PAPER | AUTHOR => counts[FIELD],
        GENE => counts[PATHWAY],
        DISEASE => ORGANS.len(),
        DRUG => DRUG_CLASSES.len(),
        _ => 1,
    }
}

/// Names of the vocabulary-like types, drawn first from the shared `names` stream.
struct VocabularyNames {
    categories: Vec<String>,
    brands: Vec<String>,
    colors: Vec<String>,
    fields: Vec<String>,
    institutions: Vec<String>,
    pathways: Vec<String>,
}

impl VocabularyNames {
    /// Categories, brands, colours, fields, institutions and pathways, in that order of draws.
    fn draw(counts: &[usize], rng: &mut Rng) -> VocabularyNames {
        let categories: Vec<String> = {
            let mods = strings(CATEGORY_MODIFIERS);
            let bases: Vec<String> = CATEGORY_BASES.iter().map(|b| b.0.to_string()).collect();
            combos(rng, counts[CATEGORY], &[mods, bases])
        };
        let brands =
            unique_names(counts[BRAND], rng, |r, _| format!("{}{}{}", r.word(BRAND_HEADS), r.word(BRAND_TAILS), r.word(BRAND_SUFFIXES)));
        let colors: Vec<String> = (0..counts[COLOR]).map(|i| COLORS[i % COLORS.len()].to_string()).collect();
        let fields = combos(rng, counts[FIELD], &[strings(FIELD_MODIFIERS), strings(FIELD_BASES)]);
        let places: Vec<String> = PLACE_HEADS.iter().flat_map(|h| PLACE_TAILS.iter().map(move |t| format!("{h}{t}"))).collect();
        let institutions = {
            let mut all: Vec<String> = INSTITUTION_FORMS.iter().flat_map(|f| places.iter().map(move |p| f.replace("{}", p))).collect();
            rng.shuffle(&mut all);
            let n = counts[INSTITUTION];
            (0..n)
                .map(|i| if i < all.len() { all[i].clone() } else { format!("{} {}", all[i % all.len()], roman(i / all.len() + 1)) })
                .collect::<Vec<_>>()
        };
        let pathways = {
            let forms: Vec<String> = PATHWAY_FORMS.iter().flat_map(|f| PATHWAY_MOLECULES.iter().map(move |m| f.replace("{}", m))).collect();
            combos(rng, counts[PATHWAY], &[strings(PATHWAY_CONTEXTS), forms])
        };
        VocabularyNames { categories, brands, colors, fields, institutions, pathways }
    }
}

/// Each node's group and keywords, from its own stream (type name, local index).
fn draw_groups(counts: &[usize], starts: &[u32], seed: u64) -> (Vec<u32>, Vec<Vec<u16>>) {
    let mut group = vec![0u32; *starts.last().unwrap_or(&0) as usize];
    let mut keywords: Vec<Vec<u16>> = vec![Vec::new(); group.len()];
    for t in 0..TYPES.len() {
        let gc = group_count(counts, t);
        let kl = keyword_list(t).len();
        for i in 0..counts[t] {
            let id = starts[t] as usize + i;
            let mut r = Rng::for_item(seed, TYPES[t], i as u64);
            group[id] = r.below(gc) as u32;
            keywords[id] = r.sample_distinct(kl, keywords_per_node(t)).into_iter().map(|k| k as u16).collect();
        }
    }
    (group, keywords)
}

/// Names of the entity types, drawn from the shared `names` stream after the vocabulary's.
struct EntityNames {
    products: Vec<String>,
    papers: Vec<String>,
    authors: Vec<String>,
    drugs: Vec<String>,
    diseases: Vec<String>,
    genes: Vec<String>,
}

impl EntityNames {
    /// Products, papers, authors, drugs, diseases and genes, in that order of draws; a name may follow
    /// its node's group (category noun, drug class, organ) or keywords (paper method).
    fn draw(counts: &[usize], starts: &[u32], group: &[u32], keywords: &[Vec<u16>], vocab: &VocabularyNames, rng: &mut Rng) -> EntityNames {
        let g = |t: usize, i: usize| group[starts[t] as usize + i] as usize;
        let (cat_names, brands) = (&vocab.categories, &vocab.brands);
        let products = unique_names(counts[PRODUCT], rng, |r, i| {
            let cat = &cat_names[g(PRODUCT, i)];
            let noun = CATEGORY_BASES.iter().find(|b| cat.ends_with(b.0)).map_or("Item", |b| b.1);
            let brand = brands.get(r.below(brands.len())).map_or("", |s| s.split(' ').next().unwrap_or(""));
            format!("{brand} {} {noun} {}{}", r.word(PRODUCT_LINES), (b'A' + r.below(26) as u8) as char, 100 + r.below(900))
        });
        let papers = unique_names(counts[PAPER], rng, |r, i| {
            let kw = &keywords[starts[PAPER] as usize + i];
            let method = kw.first().map_or("learning", |&k| PAPER_METHODS[k as usize]);
            format!("{} {} for {}", r.word(PAPER_ADJECTIVES), title_case(method), r.word(PAPER_TASKS))
        });
        let authors = unique_names(counts[AUTHOR], rng, |r, _| {
            if r.chance(0.5) {
                format!("{} {}", r.word(FIRST_NAMES), r.word(LAST_NAMES))
            } else {
                format!("{} {}. {}", r.word(FIRST_NAMES), (b'A' + r.below(26) as u8) as char, r.word(LAST_NAMES))
            }
        });
        let drugs = unique_names(counts[DRUG], rng, |r, i| {
            let class = DRUG_CLASSES[g(DRUG, i) % DRUG_CLASSES.len()];
            let mut s = format!("{}{}{}", r.word(DRUG_HEADS), r.word(DRUG_MIDS), class.0);
            if let Some(c) = s.get_mut(0..1) {
                c.make_ascii_uppercase();
            }
            s
        });
        let diseases = unique_names(counts[DISEASE], rng, |r, i| {
            if r.chance(0.15) {
                format!("{} syndrome", r.word(LAST_NAMES))
            } else {
                let organ = ORGANS[g(DISEASE, i) % ORGANS.len()];
                format!("{} {organ} {}", r.word(DISEASE_ADJECTIVES), r.word(DISEASE_NOUNS))
            }
        });
        let genes = unique_names(counts[GENE], rng, |r, _| {
            format!("{}{}{}", r.word(GENE_LETTERS), ["", "A", "B", "C", "L", "R"][r.below(6)], 1 + r.below(40))
        });
        EntityNames { products, papers, authors, drugs, diseases, genes }
    }
}

/// Members of each group, per type, in id order.
fn group_members(counts: &[usize], starts: &[u32], group: &[u32]) -> Vec<Vec<Vec<u32>>> {
    let g = |t: usize, i: usize| group[starts[t] as usize + i] as usize;
    let mut members = vec![Vec::new(); TYPES.len()];
    for t in 0..TYPES.len() {
        let mut m = vec![Vec::new(); group_count(counts, t)];
        for i in 0..counts[t] {
            m[g(t, i)].push(starts[t] + i as u32);
        }
        members[t] = m;
    }
    members
}

/// Destinations of every source node of one relation, in source order.
fn draw_relation(nodes: &Nodes, r: usize, scale: f64, seed: u64) -> Vec<Vec<u32>> {
    let spec = &RELATIONS[r];
    let (ns, nd) = (nodes.count(spec.src), nodes.count(spec.dst));
    let stream = format!("rel:{}", spec.name);
    let draw = RelationDraw { nodes, spec, ns, nd, stream: &stream, seed };
    match spec.draw {
        Draw::PerSource { lo, hi, first_is_group } => draw.per_source(lo, hi, first_is_group),
        Draw::PerDestination { lo, hi, same_group } => draw.per_destination(lo, hi, same_group),
        Draw::Dense { prime_degree, same_group } => draw.dense(prime_degree, scale, same_group),
    }
}

/// What every way of drawing one relation reads: the nodes, the relation, its source and destination
/// counts, and the stream name and seed that each node's own random stream derives from.
struct RelationDraw<'a> {
    nodes: &'a Nodes,
    spec: &'a RelSpec,
    ns: usize,
    nd: usize,
    stream: &'a str,
    seed: u64,
}

impl RelationDraw<'_> {
    /// `Draw::PerSource`: each source draws `lo..=hi` distinct destinations from its own stream.
    fn per_source(&self, lo: usize, hi: usize, first_is_group: bool) -> Vec<Vec<u32>> {
        let &RelationDraw { nodes, spec, ns, nd, stream, seed } = self;
        (0..ns)
            .into_par_iter()
            .map(|i| {
                let mut rng = Rng::for_item(seed, stream, i as u64);
                let k = rng.range(lo, hi).min(nd);
                let mut out: Vec<u32> = Vec::with_capacity(k);
                if first_is_group {
                    out.push(nodes.id(spec.dst, nodes.group[nodes.id(spec.src, i) as usize] as usize));
                }
                while out.len() < k {
                    let d = nodes.id(spec.dst, rng.below(nd));
                    if !out.contains(&d) {
                        out.push(d);
                    }
                }
                out
            })
            .collect()
    }

    /// `Draw::PerDestination`: draw per destination, then invert so that sources keep a stable order.
    fn per_destination(&self, lo: usize, hi: usize, same_group: f64) -> Vec<Vec<u32>> {
        let &RelationDraw { nodes, spec, ns, nd, stream, seed } = self;
        let per_dst: Vec<Vec<u32>> = (0..nd)
            .into_par_iter()
            .map(|j| {
                let mut rng = Rng::for_item(seed, stream, j as u64);
                let k = rng.range(lo, hi).min(ns);
                let grp =
                    &nodes.members[spec.src][nodes.group[nodes.id(spec.dst, j) as usize] as usize % nodes.members[spec.src].len().max(1)];
                let mut out: Vec<u32> = Vec::with_capacity(k);
                let mut guard = 0;
                while out.len() < k && guard < 100 {
                    guard += 1;
                    let s = if rng.chance(same_group) && !grp.is_empty() {
                        grp[rng.below(grp.len())]
                    } else {
                        nodes.id(spec.src, rng.below(ns))
                    };
                    if !out.contains(&s) {
                        out.push(s);
                    }
                }
                out
            })
            .collect();
        let mut per_src = vec![Vec::new(); ns];
        for (j, srcs) in per_dst.iter().enumerate() {
            for &s in srcs {
                per_src[nodes.local(spec.src, s)].push(nodes.id(spec.dst, j));
            }
        }
        per_src
    }

    /// `Draw::Dense`: about `prime_degree` (scaled by √scale) destinations per source, none the source
    /// itself.
    fn dense(&self, prime_degree: usize, scale: f64, same_group: f64) -> Vec<Vec<u32>> {
        let &RelationDraw { nodes, spec, ns, nd, stream, seed } = self;
        let deg = ((prime_degree as f64 * scale.sqrt()).round() as usize).clamp(2, nd.saturating_sub(1).max(1));
        (0..ns)
            .into_par_iter()
            .map(|i| {
                let mut rng = Rng::for_item(seed, stream, i as u64);
                let me = nodes.id(spec.src, i);
                let k = rng.range(deg / 2, deg + deg / 2).min(nd.saturating_sub(1));
                let grp = &nodes.members[spec.src][nodes.group[me as usize] as usize];
                let mut out: Vec<u32> = Vec::with_capacity(k);
                let mut guard = 0;
                while out.len() < k && guard < 4 * k + 16 {
                    guard += 1;
                    let d =
                        if rng.chance(same_group) && grp.len() > 1 { grp[rng.below(grp.len())] } else { nodes.id(spec.dst, rng.below(nd)) };
                    if d != me && !out.contains(&d) {
                        out.push(d);
                    }
                }
                out
            })
            .collect()
    }
}

/// Per-relation adjacency in both directions (CSR).
struct Adjacency {
    fwd: Vec<Csr>,
    back: Vec<Csr>,
}

struct Csr {
    offsets: Vec<u32>,
    targets: Vec<u32>,
}

impl Csr {
    fn build(n: usize, pairs: impl Iterator<Item = (u32, u32)> + Clone) -> Csr {
        let mut offsets = vec![0u32; n + 1];
        for (s, _) in pairs.clone() {
            offsets[s as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut targets = vec![0u32; offsets[n] as usize];
        for (s, d) in pairs {
            targets[fill[s as usize] as usize] = d;
            fill[s as usize] += 1;
        }
        Csr { offsets, targets }
    }
    fn neighbors(&self, v: u32) -> &[u32] {
        let (a, b) = (self.offsets[v as usize] as usize, self.offsets[v as usize + 1] as usize);
        &self.targets[a..b]
    }
}

fn describe_product(nodes: &Nodes, id: u32, rels: &[Vec<Vec<u32>>], rng: &mut Rng) -> String {
    let i = nodes.local(PRODUCT, id);
    let name = |x: u32| nodes.names[x as usize].as_str();
    let brand = rels[rel("has_brand")][i].first().map_or("Unknown", |&b| name(b));
    let cats: Vec<&str> = rels[rel("has_category")][i].iter().map(|&c| name(c)).collect();
    let colors: Vec<&str> = rels[rel("has_color")][i].iter().map(|&c| name(c)).collect();
    let kws: Vec<&str> = nodes.keywords[id as usize].iter().map(|&k| PRODUCT_FEATURES[k as usize]).collect();
    let noun = cats.first().map_or("item", |c| *c).to_lowercase();
    let mut d = format!("- product: {}\n- brand: {brand}\n- category: {}\n- color: {}\n", name(id), cats.join(" | "), colors.join(", "));
    let opener = [
        format!("The {} is built for {}.", name(id), rng.word(PRODUCT_USES)),
        format!("A dependable choice among {noun}, made with {} in mind.", rng.word(PRODUCT_USES)),
        format!("Designed by {brand} for {}.", rng.word(PRODUCT_USES)),
    ];
    let mut desc = opener[rng.below(3)].clone();
    match kws.as_slice() {
        [a, b, c, ..] => desc.push_str(&format!(" It stands out with its {a}, and adds {b} as well as {c}.")),
        [a, b] => desc.push_str(&format!(" It offers {a} and {b}.")),
        [a] => desc.push_str(&format!(" It offers {a}.")),
        [] => {}
    }
    d.push_str(&format!("- description: {desc}\n- features: {}\n- reviews:\n", kws.join("; ")));
    for k in 0..rng.range(1, 3) {
        d.push_str(&format!("  #{} rating {}.0: {}. {}\n", k + 1, rng.range(2, 5), rng.word(REVIEW_SUMMARIES), rng.word(REVIEW_TEXTS)));
    }
    d
}

fn describe(nodes: &Nodes, id: u32, rels: &[Vec<Vec<u32>>], degree: &[u32], seed: u64) -> String {
    let t = TYPES.iter().enumerate().rev().find(|&(t, _)| nodes.starts[t] <= id).map_or(0, |(t, _)| t);
    let mut rng = Rng::for_item(seed, "doc", u64::from(id));
    let name = nodes.names[id as usize].as_str();
    let kws: Vec<&str> = nodes.keywords[id as usize].iter().map(|&k| keyword_list(t)[k as usize]).collect();
    let kw = |i: usize| kws.get(i).copied().unwrap_or("");
    let grp = nodes.group[id as usize] as usize;
    match t {
        PRODUCT => describe_product(nodes, id, rels, &mut rng),
        BRAND => format!(
            "- brand: {name}\n- description: {name} sells {} products through online and retail stores.\n",
            CATEGORY_BASES[rng.below(CATEGORY_BASES.len())].2.to_lowercase()
        ),
        CATEGORY => {
            let dept = CATEGORY_BASES.iter().find(|b| name.contains(b.0)).map_or("General", |b| b.2);
            format!("- category: {name}\n- department: {dept}\n")
        }
        COLOR => format!("- color: {name}\n"),
        PAPER => {
            let fields: Vec<&str> =
                rels[rel("has_field")][nodes.local(PAPER, id)].iter().map(|&f| nodes.names[f as usize].as_str()).collect();
            format!(
                "- paper: {name}\n- venue: {} {}\n- fields of study: {}\n- abstract: We study {} with {}. Unlike prior work, our approach combines {} with {}, which {}. Experiments on {} benchmarks show {} improvements.\n",
                rng.word(VENUES),
                2000 + rng.below(25),
                fields.join(", "),
                rng.word(PAPER_TASKS).to_lowercase(),
                kw(0),
                kw(1),
                kw(2),
                ["scales to millions of examples", "needs far fewer labels", "comes with convergence guarantees", "is easy to implement"]
                    [rng.below(4)],
                1 + rng.below(9),
                ["consistent", "significant", "modest but reliable", "state-of-the-art"][rng.below(4)],
            )
        }
        AUTHOR => format!(
            "- author: {name}\n- research interests: {}\n- number of papers: {}\n- citations: {}\n",
            nodes.names[nodes.id(FIELD, grp % nodes.count(FIELD)) as usize],
            degree[id as usize],
            rng.below(5000)
        ),
        INSTITUTION => format!(
            "- institution: {name}\n- type: {}\n",
            ["research university", "public university", "research institute", "teaching hospital"][rng.below(4)]
        ),
        FIELD => format!("- field of study: {name}\n- level: {}\n", 1 + usize::from(name.contains(' '))),
        DRUG => {
            let class = DRUG_CLASSES[grp % DRUG_CLASSES.len()].1;
            format!(
                "- drug: {name}\n- class: {class}\n- description: {name} is a {class}. Clinical use is marked by {} and {}.\n- half-life: {} hours\n",
                kw(0),
                kw(1),
                2 + rng.below(46)
            )
        }
        DISEASE => format!(
            "- disease: {name}\n- affected system: {}\n- symptoms: {}\n- description: A {} condition; patients commonly report {}, {} and {}.\n",
            ORGANS[grp % ORGANS.len()],
            kws.join(", "),
            ["rare", "common", "progressive", "treatable"][rng.below(4)],
            kw(0),
            kw(1),
            kw(2)
        ),
        GENE => format!(
            "- gene: {name}\n- full name: {} {} {}\n- summary: This gene encodes a {} that plays a role in {} and {}.\n",
            rng.word(PATHWAY_MOLECULES),
            rng.word(GENE_FAMILIES),
            1 + rng.below(20),
            rng.word(GENE_FAMILIES),
            kw(0),
            kw(1)
        ),
        _ => format!("- pathway: {name}\n- summary: A pathway involved in {} and {}.\n", kw(0), kw(1)),
    }
}

struct Template {
    pattern: &'static str,
    start: usize,
    steps: &'static [(&'static str, bool)],
    /// Layer whose nodes must carry the text restriction (1 = first hop).
    restrict: usize,
    phrasings: &'static [&'static str],
}

const F: bool = true;
const B: bool = false;

const TEMPLATES: &[Template] = &[
    Template {
        pattern: "brand>product+text",
        start: BRAND,
        steps: &[("has_brand", B)],
        restrict: 1,
        phrasings: &[
            "Looking for {kw} products from {anchor}.",
            "Which {anchor} products come with {kw}?",
            "Show me items made by {anchor} that feature {kw}.",
            "I want something by {anchor} with {kw}.",
        ],
    },
    Template {
        pattern: "category>product+text",
        start: CATEGORY,
        steps: &[("has_category", B)],
        restrict: 1,
        phrasings: &["Recommend {anchor} with {kw}.", "I need {anchor} that offer {kw}.", "Any {anchor} featuring {kw}?"],
    },
    Template {
        pattern: "product>product+text",
        start: PRODUCT,
        steps: &[("also_bought", F)],
        restrict: 1,
        phrasings: &[
            "Customers who bought the {anchor} also bought which items with {kw}?",
            "What goes well with the {anchor} and has {kw}?",
            "Items frequently bought together with {anchor} that offer {kw}.",
        ],
    },
    Template {
        pattern: "brand>product+text>category",
        start: BRAND,
        steps: &[("has_brand", B), ("has_category", F)],
        restrict: 1,
        phrasings: &[
            "Which categories do the {kw} products of {anchor} belong to?",
            "In what categories can I find {anchor} items with {kw}?",
        ],
    },
    Template {
        pattern: "product>product+text>brand",
        start: PRODUCT,
        steps: &[("also_bought", F), ("has_brand", F)],
        restrict: 1,
        phrasings: &[
            "Which brands make products with {kw} that are often bought with the {anchor}?",
            "Brands of items with {kw} frequently purchased together with {anchor}.",
        ],
    },
    Template {
        pattern: "author>paper+text",
        start: AUTHOR,
        steps: &[("writes", F)],
        restrict: 1,
        phrasings: &[
            "Papers by {anchor} on {kw}.",
            "Find publications of {anchor} that use {kw}.",
            "What has {anchor} written about {kw}?",
        ],
    },
    Template {
        pattern: "institution>author>paper+text",
        start: INSTITUTION,
        steps: &[("affiliated_with", B), ("writes", F)],
        restrict: 2,
        phrasings: &[
            "Papers about {kw} written by researchers at {anchor}.",
            "Which publications from authors affiliated with {anchor} apply {kw}?",
        ],
    },
    Template {
        pattern: "field>paper+text",
        start: FIELD,
        steps: &[("has_field", B)],
        restrict: 1,
        phrasings: &["{anchor} papers that use {kw}.", "Research in {anchor} based on {kw}."],
    },
    Template {
        pattern: "author>paper>paper+text",
        start: AUTHOR,
        steps: &[("writes", F), ("cites", F)],
        restrict: 2,
        phrasings: &["Papers on {kw} cited by {anchor}.", "Which papers about {kw} does {anchor} cite?"],
    },
    Template {
        pattern: "author>paper+text>author>institution",
        start: AUTHOR,
        steps: &[("writes", F), ("writes", B), ("affiliated_with", F)],
        restrict: 1,
        phrasings: &[
            "Institutions of researchers who co-authored papers on {kw} with {anchor}.",
            "Where do the co-authors of {anchor}'s papers on {kw} work?",
        ],
    },
    Template {
        pattern: "institution>author>paper+text>field",
        start: INSTITUTION,
        steps: &[("affiliated_with", B), ("writes", F), ("has_field", F)],
        restrict: 2,
        phrasings: &[
            "Fields of study of papers on {kw} by researchers at {anchor}.",
            "Which research fields do {anchor} authors cover with work on {kw}?",
        ],
    },
    Template {
        pattern: "disease>drug+text",
        start: DISEASE,
        steps: &[("indication", B)],
        restrict: 1,
        phrasings: &["Which drugs with {kw} are used to treat {anchor}?", "Treatments for {anchor} that involve {kw}."],
    },
    Template {
        pattern: "disease>gene>drug+text",
        start: DISEASE,
        steps: &[("associated_with", B), ("target", B)],
        restrict: 2,
        phrasings: &[
            "Drugs with {kw} that target genes associated with {anchor}.",
            "Which medications known for {kw} act on genes linked to {anchor}?",
        ],
    },
    Template {
        pattern: "pathway>gene>disease+text",
        start: PATHWAY,
        steps: &[("in_pathway", B), ("associated_with", F)],
        restrict: 2,
        phrasings: &[
            "Diseases presenting with {kw} that are linked to genes in the {anchor}.",
            "Which conditions causing {kw} involve genes of the {anchor}?",
        ],
    },
    Template {
        pattern: "drug>gene>pathway+text",
        start: DRUG,
        steps: &[("target", F), ("in_pathway", F)],
        restrict: 2,
        phrasings: &[
            "Pathways related to {kw} that contain targets of {anchor}.",
            "Which pathways involved in {kw} include genes targeted by {anchor}?",
        ],
    },
    Template {
        pattern: "drug>gene>disease>drug+text",
        start: DRUG,
        steps: &[("target", F), ("associated_with", F), ("indication", B)],
        restrict: 3,
        phrasings: &[
            "Which drugs with {kw} treat diseases associated with the targets of {anchor}?",
            "Find medications marked by {kw} for diseases linked to genes that {anchor} targets.",
        ],
    },
    Template {
        pattern: "gene>disease+text",
        start: GENE,
        steps: &[("associated_with", F)],
        restrict: 1,
        phrasings: &["Which diseases with {kw} are associated with {anchor}?", "Conditions featuring {kw} linked to the gene {anchor}."],
    },
];

/// Largest answer set a generated query may have (STaRK queries have few answers).
pub const MAX_ANSWERS: usize = 20;
/// Largest intermediate layer explored while generating a query.
const MAX_LAYER: usize = 20_000;

fn try_query(nodes: &Nodes, adj: &Adjacency, tpl: &Template, rng: &mut Rng) -> Option<Query> {
    let anchor = nodes.id(tpl.start, rng.below(nodes.count(tpl.start)));
    let mut layer = vec![anchor];
    let mut keyword: Option<&'static str> = None;
    for (depth, &(rname, forward)) in tpl.steps.iter().enumerate() {
        let r = rel(rname);
        let csr = if forward { adj.fwd.get(r)? } else { adj.back.get(r)? };
        let mut next: Vec<u32> = layer.iter().flat_map(|&v| csr.neighbors(v).iter().copied()).collect();
        next.sort_unstable();
        next.dedup();
        if next.is_empty() || next.len() > MAX_LAYER {
            return None;
        }
        if depth + 1 == tpl.restrict {
            let t = if forward { RELATIONS[r].dst } else { RELATIONS[r].src };
            let holder = next[rng.below(next.len())];
            let kws = &nodes.keywords[holder as usize];
            let k = *rng.pick(kws)?;
            keyword = Some(keyword_list(t)[k as usize]);
            next.retain(|&v| nodes.keywords[v as usize].contains(&k));
        }
        layer = next;
    }
    layer.retain(|&v| v != anchor);
    if layer.is_empty() || layer.len() > MAX_ANSWERS {
        return None;
    }
    let phr = rng.word(tpl.phrasings);
    let text = phr.replace("{anchor}", &nodes.names[anchor as usize]).replace("{kw}", keyword?);
    Some(Query { text, pattern: tpl.pattern, hops: tpl.steps.len() as u8, answers: layer })
}

/// Generates the knowledge base at `scale` (1.0 ≈ STaRK-Prime) with `n_queries` queries.
pub fn generate(scale: f64, n_queries: usize, seed: u64) -> Kb {
    let nodes = make_nodes(scale, seed);
    let n = nodes.names.len();
    let rels: Vec<Vec<Vec<u32>>> = (0..RELATIONS.len()).map(|r| draw_relation(&nodes, r, scale, seed)).collect();
    let mut edges: Vec<(u32, u32, u16)> = Vec::with_capacity(rels.iter().map(|r| r.iter().map(Vec::len).sum::<usize>()).sum());
    for (r, per_src) in rels.iter().enumerate() {
        let spec = &RELATIONS[r];
        for (i, dsts) in per_src.iter().enumerate() {
            let s = nodes.id(spec.src, i);
            edges.extend(dsts.iter().map(|&d| (s, d, r as u16)));
        }
    }
    let mut degree = vec![0u32; n];
    for &(s, d, _) in &edges {
        degree[s as usize] += 1;
        degree[d as usize] += 1;
    }
    let docs: Vec<String> = (0..n as u32).into_par_iter().map(|id| describe(&nodes, id, &rels, &degree, seed)).collect();
    let adj = Adjacency {
        fwd: (0..RELATIONS.len()).map(|r| Csr::build(n, edges.iter().filter(move |e| e.2 as usize == r).map(|e| (e.0, e.1)))).collect(),
        back: (0..RELATIONS.len()).map(|r| Csr::build(n, edges.iter().filter(move |e| e.2 as usize == r).map(|e| (e.1, e.0)))).collect(),
    };
    let mut rng = Rng::for_item(seed, "queries", 0);
    let mut queries = Vec::with_capacity(n_queries);
    let mut t = 0usize;
    let mut failures = 0usize;
    while queries.len() < n_queries && failures < 200 * TEMPLATES.len() {
        let tpl = &TEMPLATES[t % TEMPLATES.len()];
        match (0..40).find_map(|_| try_query(&nodes, &adj, tpl, &mut rng)) {
            Some(q) => {
                queries.push(q);
                failures = 0;
            }
            None => failures += 1,
        }
        t += 1;
    }
    Kb { starts: nodes.starts, names: nodes.names, docs, edges, queries }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_follow_from_graph_and_text() {
        let kb = generate(0.004, 80, 11);
        assert_eq!(kb.queries.len(), 80);
        let ntypes = TYPES.len();
        assert_eq!(kb.starts.len(), ntypes + 1);
        for q in &kb.queries {
            assert!(!q.answers.is_empty() && q.answers.len() <= MAX_ANSWERS, "{}", q.text);
            let tpl = TEMPLATES.iter().find(|t| t.pattern == q.pattern).expect("template");
            // The anchor's name occurs in the query text.
            let anchor_type = tpl.start;
            let (a, b) = (kb.starts[anchor_type] as usize, kb.starts[anchor_type + 1] as usize);
            assert!(kb.names[a..b].iter().any(|n| q.text.contains(n.as_str())), "no anchor in {}", q.text);
            // Every answer has the template's target type.
            let last = tpl.steps.last().expect("steps");
            let r = &RELATIONS[rel(last.0)];
            let want = if last.1 { r.dst } else { r.src };
            for &ans in &q.answers {
                assert_eq!(kb.type_of(ans), want, "{}", q.text);
            }
            // When the restriction is on the answers, the answer docs contain the restriction text.
            if tpl.restrict == tpl.steps.len() {
                for &ans in &q.answers {
                    let doc = &kb.docs[ans as usize];
                    assert!(keyword_list(want).iter().any(|k| q.text.contains(k) && doc.contains(k)), "{}\n{doc}", q.text);
                }
            }
        }
        let hops: HashSet<u8> = kb.queries.iter().map(|q| q.hops).collect();
        assert_eq!(hops, HashSet::from([1, 2, 3]));
    }

    #[test]
    fn same_seed_same_kb_other_seed_differs() {
        let a = generate(0.004, 20, 5);
        let b = generate(0.004, 20, 5);
        let c = generate(0.004, 20, 6);
        assert_eq!(a.docs, b.docs);
        assert_eq!(a.edges, b.edges);
        assert_ne!(a.docs, c.docs);
    }

    #[test]
    fn edges_connect_the_declared_types() {
        let kb = generate(0.004, 0, 2);
        for &(s, d, r) in &kb.edges {
            let spec = &RELATIONS[r as usize];
            assert_eq!(kb.type_of(s), spec.src);
            assert_eq!(kb.type_of(d), spec.dst);
            assert_ne!(s, d);
        }
    }
}
