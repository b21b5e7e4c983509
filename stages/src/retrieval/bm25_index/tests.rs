//! Tests of the BM25 index: against the formula by brute force, against the bm25s and rank_bm25
//! fixtures, across the dense and sparse query paths, and through persistence.

use std::collections::HashMap;

use arrow::array::{Array, UInt32Array};

use super::*;
use crate::shared::run::by_score_then_id;
use crate::shared::text::TokenizerKind;

fn toks(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// Brute-force BM25 straight from the formula, for comparison with the index.
fn brute(docs: &[Vec<String>], q: &[String], p: Bm25Params) -> Vec<f32> {
    let n = docs.len();
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f32 / n as f32;
    let dfs: Vec<usize> = q.iter().map(|t| docs.iter().filter(|x| x.contains(t)).count()).collect();
    docs.iter()
        .map(|d| {
            q.iter()
                .zip(&dfs)
                .map(|(t, &df)| {
                    let tf = d.iter().filter(|x| *x == t).count() as f32;
                    if tf == 0.0 {
                        return 0.0;
                    }
                    let idf = ((1.0 + (n as f64 - df as f64 + 0.5) / (df as f64 + 0.5)).ln()) as f32;
                    idf * tf / (tf + p.k1 * (1.0 - p.b + p.b * d.len() as f32 / avg))
                })
                .sum()
        })
        .collect()
}

#[test]
fn a_k_beyond_the_corpus_returns_every_match_without_allocating_k() {
    let docs: Vec<Vec<String>> = ["red tent", "blue tent", "red shoe"].iter().map(|s| toks(s)).collect();
    let idx = Index::build(&docs, Bm25Params::default());
    // Dense and sparse paths: a common term (every doc) and a rare one; k = 10^15 would abort
    // the process if a heap were sized by it.
    assert_eq!(idx.search(&toks("tent red shoe blue"), 1_000_000_000_000_000, None).len(), 3);
    assert_eq!(idx.search(&toks("shoe"), usize::MAX, None).len(), 1);
}

#[test]
fn index_matches_formula_and_orders_ties_by_id() {
    let docs: Vec<Vec<String>> =
        ["red tent tent", "blue tent", "red red red shoe", "green mug", "tent red"].iter().map(|s| toks(s)).collect();
    let p = Bm25Params::default();
    let idx = Index::build(&docs, p);
    let q = toks("red tent");
    let want = brute(&docs, &q, p);
    let got = idx.search(&q, 10, None);
    for &(d, s) in &got {
        assert!((s - want[d as usize]).abs() < 1e-5, "doc {d}: {s} vs {}", want[d as usize]);
    }
    assert_eq!(got.len(), 4, "doc 3 has no query term");
    let mut sorted: Vec<(u32, f32)> = (0..5).map(|d| (d, want[d as usize])).filter(|x| x.1 > 0.0).collect();
    sorted.sort_by(by_score_then_id);
    assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), sorted.iter().map(|x| x.0).collect::<Vec<_>>());
}

fn token_lists(path: &std::path::Path, id_col: &str) -> Vec<(u32, Vec<String>)> {
    use arrow::array::AsArray;
    let b = tgrag_schemas::io::read_parquet(path).unwrap_or_else(|e| panic!("read fixture: {e:?}"));
    let ids = arrow::compute::cast(b.column_by_name(id_col).unwrap_or_else(|| panic!("ids")), &arrow::datatypes::DataType::UInt32)
        .unwrap_or_else(|e| panic!("cast: {e:?}"));
    let ids = ids.as_primitive::<arrow::datatypes::UInt32Type>();
    let toks = b.column_by_name("tokens").unwrap_or_else(|| panic!("tokens")).as_list::<i32>();
    (0..b.num_rows())
        .map(|i| {
            let l = toks.value(i);
            let s = l.as_string::<i32>();
            (ids.value(i), (0..s.len()).map(|j| s.value(j).to_string()).collect())
        })
        .collect()
}

/// Compares top-20 lists with the fixture: same ids up to ties (same score set), scores within tol.
fn check_against(dir: &std::path::Path, file: &str, params: Bm25Params, tol: f32) {
    use arrow::array::AsArray;
    let docs = token_lists(&dir.join("corpus.parquet"), "doc_id");
    assert!(docs.iter().enumerate().all(|(i, d)| d.0 as usize == i));
    let corpus: Vec<Vec<String>> = docs.into_iter().map(|d| d.1).collect();
    let index = Index::build(&corpus, params);
    let queries = token_lists(&dir.join("queries.parquet"), "query_id");
    let want = tgrag_schemas::io::read_parquet(&dir.join(file)).unwrap_or_else(|e| panic!("top20: {e:?}"));
    let cast = |c: &str, t| {
        arrow::compute::cast(want.column_by_name(c).unwrap_or_else(|| panic!("col")), &t).unwrap_or_else(|e| panic!("cast: {e:?}"))
    };
    let (q, d, s) = (
        cast("query_id", arrow::datatypes::DataType::UInt32),
        cast("doc_id", arrow::datatypes::DataType::UInt32),
        cast("score", arrow::datatypes::DataType::Float64),
    );
    let (q, d, s) = (
        q.as_primitive::<arrow::datatypes::UInt32Type>(),
        d.as_primitive::<arrow::datatypes::UInt32Type>(),
        s.as_primitive::<arrow::datatypes::Float64Type>(),
    );
    let mut expected: HashMap<u32, Vec<(u32, f64)>> = HashMap::new();
    for i in 0..want.num_rows() {
        expected.entry(q.value(i)).or_default().push((d.value(i), s.value(i)));
    }
    for (qid, toks) in &queries {
        let got = index.search(toks, 20, None);
        let exp = expected.get(qid).cloned().unwrap_or_default();
        assert_eq!(got.len(), exp.len(), "query {qid}: {got:?} vs {exp:?}");
        for (g, e) in got.iter().zip(&exp) {
            assert!(((g.1 as f64) - e.1).abs() <= f64::from(tol) * e.1.abs().max(1.0), "query {qid}: score {} vs {}", g.1, e.1);
            if g.0 != e.0 {
                // Only a tie may reorder ids.
                let tied = exp.iter().any(|x| x.0 == g.0 && (x.1 - e.1).abs() < 1e-4);
                assert!(tied, "query {qid}: doc {} where {} was expected", g.0, e.0);
            }
        }
    }
}

#[test]
fn matches_bm25s_lucene_fixture() {
    check_against(
        &crate::shared::test_support::fixture("bm25"),
        "bm25s_lucene_top20.parquet",
        Bm25Params { k1: 1.2, b: 0.75, variant: Variant::Lucene, epsilon: 0.25 },
        1e-4,
    );
}

#[test]
fn matches_rank_bm25_okapi_fixture() {
    let dir = crate::shared::test_support::fixture("bm25");
    check_against(&dir, "rank_bm25_top20.parquet", Bm25Params { k1: 1.5, b: 0.75, variant: Variant::Okapi, epsilon: 0.25 }, 1e-4);
}

/// A seeded corpus with a skewed vocabulary: several terms are in more than an eighth of the
/// documents (dense columns, dense accumulation) and there are more documents than one build chunk.
fn skewed_corpus(n: usize) -> Vec<String> {
    let mut x: u64 = tgrag_schemas::seed::GAMMA;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|_| {
            let len = 3 + next() % 12;
            (0..len)
                .map(|_| {
                    // Term index with a heavy head: min of two uniforms over 0..60, squared-ish.
                    let a = next() % 60;
                    let b = next() % 60;
                    format!("w{}", a.min(b) * a.min(b) / 60)
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn dense_columns_and_chunking_agree_with_brute_force() {
    let texts = skewed_corpus(4500);
    let toks: Vec<Vec<String>> = texts.iter().map(|t| crate::shared::text::tokenize(t, TokenizerKind::Bm25s)).collect();
    let p = Bm25Params::default();
    let from_texts = Index::build_texts(&texts.iter().map(String::as_str).collect::<Vec<_>>(), TokenizerKind::Bm25s, p);
    let from_tokens = Index::build(&toks, p);
    assert!(from_texts.dense_slot.iter().filter(|&&s| s != u32::MAX).count() >= 3, "the head terms must get dense columns");
    assert_eq!(from_texts.vocab_size(), from_tokens.vocab_size());
    for q in ["w0", "w0 w1 w2", "w3 w57", "w40 w0 w0", "w9 w16 w25 w36"] {
        let qt = toks_of(q);
        let want = brute(&toks, &qt, p);
        let got = from_texts.search_text(q, TokenizerKind::Bm25s, 25, None);
        assert_eq!(got, from_tokens.search(&qt, 25, None), "query {q}: both builds rank alike");
        let mut exp: Vec<(u32, f32)> = want.iter().enumerate().filter(|x| *x.1 > 0.0).map(|(d, &s)| (d as u32, s)).collect();
        exp.sort_by(by_score_then_id);
        exp.truncate(25);
        assert_eq!(got.len(), exp.len(), "query {q}");
        for (g, e) in got.iter().zip(&exp) {
            assert!((g.1 - e.1).abs() <= 1e-4 * e.1.max(1.0), "query {q}: {g:?} vs {e:?}");
        }
        // Ranks agree except among near-equal scores.
        for (g, e) in got.iter().zip(&exp) {
            assert!(g.0 == e.0 || (want[g.0 as usize] - e.1).abs() < 1e-4, "query {q}: {g:?} vs {e:?}");
        }
    }
}

#[test]
fn persisted_index_reloads_and_scores_identically() {
    let texts = skewed_corpus(3000);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let p = Bm25Params { k1: 1.2, b: 0.6, variant: Variant::Okapi, epsilon: 0.25 };
    let a = Index::build_texts(&refs, TokenizerKind::Simple, p);
    let b = Index::build_texts(&refs[..700], TokenizerKind::Bm25s, Bm25Params::default());
    let nodes_a: Vec<u32> = (0..3000).map(|d| 10 * d + 3).collect();
    let nodes_b: Vec<u32> = (0..700).map(|d| 2 * d).collect();
    let (ta, tb) = (
        a.to_tables("*", &nodes_a).unwrap_or_else(|e| panic!("a: {e:?}")),
        b.to_tables("paper", &nodes_b).unwrap_or_else(|e| panic!("b: {e:?}")),
    );
    let cat = |k: usize| {
        arrow::compute::concat_batches(&ta[k].schema(), &[ta[k].clone(), tb[k].clone()]).unwrap_or_else(|e| panic!("concat: {e:?}"))
    };
    let (idx, terms, postings, docs) = (cat(0), cat(1), cat(2), cat(3));
    for (scope, orig, nodes) in [("*", &a, &nodes_a), ("paper", &b, &nodes_b)] {
        let (re, node_of) = Index::from_tables(scope, &idx, &terms, &postings, &docs).unwrap_or_else(|e| panic!("load: {e:?}"));
        assert_eq!(&node_of, nodes);
        assert_eq!((re.params, re.tokenizer, re.vocab_size()), (orig.params, orig.tokenizer, orig.vocab_size()));
        for q in ["w0", "w1 w2 w3", "w57 w0", "w30"] {
            let kind = orig.tokenizer.unwrap_or_default();
            assert_eq!(re.search_text(q, kind, 30, None), orig.search_text(q, kind, 30, None), "scope {scope}, query {q}");
        }
    }
    assert!(Index::from_tables("nope", &idx, &terms, &postings, &docs).is_err());
    // Postings out of order are refused, not silently mis-scored.
    let rev = arrow::compute::take_record_batch(&postings, &UInt32Array::from_iter_values((0..postings.num_rows() as u32).rev()))
        .unwrap_or_else(|e| panic!("take: {e:?}"));
    let e = Index::from_tables("*", &idx, &terms, &rev, &docs).expect_err("unsorted postings");
    assert!(e.to_string().contains("sorted by term then node"), "{e}");
}

fn toks_of(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

#[test]
fn lucene_idf_hand_computed() {
    // N = 4, df = 1: ln(1 + 3.5/1.5) = ln(3.3333)
    assert!((Bm25Params::idf_lucene(4, 1) - (10.0f32 / 3.0).ln()).abs() < 1e-6);
}

/// Statistics given by hand: the maths needs no index.
struct HandStats {
    dfs: Vec<usize>,
}

impl Bm25Stats for HandStats {
    fn num_docs(&self) -> usize {
        4
    }
    fn avg_doc_len(&self) -> f32 {
        2.0
    }
    fn doc_freq(&self, term: u32) -> usize {
        self.dfs[term as usize]
    }
}

#[test]
fn okapi_idf_floors_negative_idf_at_epsilon_times_the_mean() {
    // N = 4: df 1 → ln(3.5/1.5), df 3 → ln(1.5/3.5) < 0, df 2 → ln(1) = 0.
    let stats = HandStats { dfs: vec![1, 3, 2] };
    let p = Bm25Params { k1: 1.5, b: 0.75, variant: Variant::Okapi, epsilon: 0.25 };
    let raw = [(3.5f64 / 1.5).ln(), (1.5f64 / 3.5).ln(), 0.0];
    let floor = 0.25 * (raw.iter().sum::<f64>() / 3.0);
    assert_eq!(p.idfs(&stats, 3), vec![raw[0] as f32, floor as f32, 0.0]);
    let lucene = Bm25Params::default().idfs(&stats, 3);
    assert!(lucene.iter().all(|&x| x > 0.0), "Lucene idf is never negative: {lucene:?}");
    // tf part at the average length: tf·(k1+1)/(tf + k1) for Okapi.
    assert!((p.tf_part(2.0, stats.avg_doc_len(), stats.avg_doc_len()) - 2.0 * 2.5 / 3.5).abs() < 1e-6);
}
