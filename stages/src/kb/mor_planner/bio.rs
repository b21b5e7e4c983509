//! Restrictions as BIO labels over a query's words ([`crate::kb::kb::words`]): the tagger's input
//! sentence (hashed words, word shapes), gold spans to labels, predicted labels to spans, and the
//! restriction token F1 of the module doc.

use std::collections::{BTreeMap, HashMap};

use tgrag_models::tagger::Sentence;

use crate::kb::kb::words;

/// Word shape ids (see `models::tagger::SHAPES`): case/digit class, +5 when next to a quote.
pub(super) fn shape(text: &str, s: usize, e: usize) -> u32 {
    let w = &text[s..e];
    let base = if w.chars().any(|c| c.is_numeric()) {
        4
    } else if w.chars().all(|c| !c.is_uppercase()) {
        1
    } else if w.chars().count() > 1 && w.chars().all(|c| !c.is_lowercase()) {
        3
    } else if w.chars().next().is_some_and(char::is_uppercase) {
        2
    } else {
        5
    };
    let quote = |c: Option<char>| c.is_some_and(|c| "'\"“”‘’".contains(c));
    let near_quote = quote(text[..s].chars().next_back()) || quote(text[e..].chars().next());
    base + if near_quote { 5 } else { 0 }
}

fn bucket(word: &str, buckets: usize) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in word.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    1 + (h % (buckets.max(2) as u64 - 1)) as u32
}

/// Tagger input of a query (labels empty).
pub(super) fn sentence(query: u32, text: &str, buckets: usize) -> (Sentence, Vec<(String, usize, usize)>) {
    let ws = words(text);
    let s = Sentence {
        query,
        words: ws.iter().map(|(w, _, _)| bucket(w, buckets)).collect(),
        shapes: ws.iter().map(|(_, s, e)| shape(text, *s, *e)).collect(),
        plan_types: Vec::new(),
        labels: Vec::new(),
    };
    (s, ws)
}

/// BIO labels of gold restrictions over the query's words.
pub(super) fn gold_labels(ws: &[(String, usize, usize)], restrictions: &[(String, Vec<String>)], types: &HashMap<String, u32>) -> Vec<u32> {
    let mut labels = vec![0u32; ws.len()];
    for (ty, texts) in restrictions {
        let Some(&t) = types.get(ty) else { continue };
        for text in texts {
            let span: Vec<String> = words(text).into_iter().map(|w| w.0).collect();
            if span.is_empty() || span.len() > ws.len() {
                continue;
            }
            let at = (0..=ws.len() - span.len()).find(|&i| (0..span.len()).all(|k| labels[i + k] == 0 && ws[i + k].0 == span[k]));
            if let Some(i) = at {
                labels[i] = 1 + 2 * t;
                for l in &mut labels[i + 1..i + span.len()] {
                    *l = 2 + 2 * t;
                }
            }
        }
    }
    labels
}

/// Restriction spans from labels: `(type, text)` in order of appearance.
pub(super) fn spans(text: &str, ws: &[(String, usize, usize)], labels: &[u32], types: &[String]) -> Vec<(String, Vec<String>)> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut cur: Option<(u32, usize, usize)> = None;
    let mut flush = |c: Option<(u32, usize, usize)>| {
        if let Some((t, s, e)) = c
            && let Some(ty) = types.get(t as usize)
        {
            out.entry(ty.clone()).or_default().push(text[s..e].to_string());
        }
    };
    for (i, &l) in labels.iter().enumerate() {
        let (_, s, e) = ws[i];
        if l == 0 {
            flush(cur.take());
            continue;
        }
        let t = (l - 1) / 2;
        match cur {
            Some((ct, cs, _)) if ct == t && l % 2 == 0 => cur = Some((ct, cs, e)),
            _ => {
                flush(cur.take());
                cur = Some((t, s, e));
            }
        }
    }
    flush(cur);
    out.into_iter().collect()
}

/// Restriction token F1 of one query (see the module doc).
pub fn token_f1(pred: &[(String, Vec<String>)], gold: &[(String, Vec<String>)]) -> f64 {
    let bag = |r: &[(String, Vec<String>)]| {
        let mut m: HashMap<(String, String), usize> = HashMap::new();
        for (t, texts) in r {
            for x in texts {
                for (w, _, _) in words(x) {
                    *m.entry((t.clone(), w)).or_default() += 1;
                }
            }
        }
        m
    };
    let (p, g) = (bag(pred), bag(gold));
    let (np, ng): (usize, usize) = (p.values().sum(), g.values().sum());
    if np + ng == 0 {
        return 1.0;
    }
    let common: usize = p.iter().map(|(k, &c)| c.min(g.get(k).copied().unwrap_or(0))).sum();
    2.0 * common as f64 / (np + ng) as f64
}
