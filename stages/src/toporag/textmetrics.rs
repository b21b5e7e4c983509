//! Text-overlap metrics for context quality (TopoRAG §6): BLEU as sacrebleu 2.x computes it
//! (13a tokenisation, `exp` smoothing; sentence BLEU with effective order, corpus BLEU without) and
//! ROUGE-L F1 as rouge-score computes it (no stemmer). Checked against `tests/fixtures/text_metrics`.

use std::collections::HashMap;

/// sacrebleu's `13a` tokenizer (mteval-v13a): unescape the four XML entities, split punctuation off
/// (periods and commas only when not next to a digit, dashes after a digit), single spaces.
pub fn tokenize_13a(line: &str) -> String {
    let mut s = line.replace("<skipped>", "").replace("-\n", "").replace('\n', " ");
    if s.contains('&') {
        s = s.replace("&quot;", "\"").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">");
    }
    let s = format!(" {s} ");
    // 1. Punctuation and symbols other than ' , - . become separate tokens.
    let mut a = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        let punct = matches!(c, '{'..='~' | '['..='`' | ' '..='&' | '('..='+' | ':'..='@' | '/');
        if punct {
            a.push(' ');
            a.push(c);
            a.push(' ');
        } else {
            a.push(c);
        }
    }
    // 2–4. re.sub scans left to right over non-overlapping two-character matches.
    let pass = |text: &str, first: &dyn Fn(char) -> bool, second: &dyn Fn(char) -> bool, join: &dyn Fn(char, char, &mut String)| {
        let c: Vec<char> = text.chars().collect();
        let mut out = String::with_capacity(text.len() + 16);
        let mut i = 0;
        while i < c.len() {
            if i + 1 < c.len() && first(c[i]) && second(c[i + 1]) {
                join(c[i], c[i + 1], &mut out);
                i += 2;
            } else {
                out.push(c[i]);
                i += 1;
            }
        }
        out
    };
    let digit = |c: char| c.is_ascii_digit();
    let dot_comma = |c: char| c == '.' || c == ',';
    let b = pass(&a, &|c| !digit(c), &dot_comma, &|x, y, o| {
        o.push(x);
        o.push(' ');
        o.push(y);
        o.push(' ');
    });
    let c = pass(&b, &dot_comma, &|c| !digit(c), &|x, y, o| {
        o.push(' ');
        o.push(x);
        o.push(' ');
        o.push(y);
    });
    let d = pass(&c, &digit, &|c| c == '-', &|x, y, o| {
        o.push(x);
        o.push(' ');
        o.push(y);
        o.push(' ');
    });
    py_split(&d).collect::<Vec<_>>().join(" ")
}

/// Python's `str.split()` (whitespace includes the separators U+001C–U+001F).
fn py_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)).filter(|t| !t.is_empty())
}

/// Sufficient statistics of BLEU for one segment or a corpus.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BleuStats {
    pub counts: [u64; 4],
    pub totals: [u64; 4],
    pub sys_len: u64,
    pub ref_len: u64,
}

impl BleuStats {
    /// Statistics of one hypothesis against one reference (both raw strings).
    pub fn of(hypothesis: &str, reference: &str) -> BleuStats {
        let (h, r) = (tokenize_13a(hypothesis.trim_end()), tokenize_13a(reference.trim_end()));
        let (h, r): (Vec<&str>, Vec<&str>) =
            (h.split(' ').filter(|t| !t.is_empty()).collect(), r.split(' ').filter(|t| !t.is_empty()).collect());
        let mut st = BleuStats { sys_len: h.len() as u64, ref_len: r.len() as u64, ..Default::default() };
        for n in 1..=4 {
            let mut refc: HashMap<&[&str], u64> = HashMap::new();
            for g in r.windows(n) {
                *refc.entry(g).or_default() += 1;
            }
            let mut hypc: HashMap<&[&str], u64> = HashMap::new();
            for g in h.windows(n) {
                *hypc.entry(g).or_default() += 1;
            }
            st.counts[n - 1] = hypc.iter().map(|(g, &c)| c.min(refc.get(g).copied().unwrap_or(0))).sum();
            st.totals[n - 1] = h.len().saturating_sub(n - 1) as u64;
        }
        st
    }

    pub fn add(&mut self, o: &BleuStats) {
        for n in 0..4 {
            self.counts[n] += o.counts[n];
            self.totals[n] += o.totals[n];
        }
        self.sys_len += o.sys_len;
        self.ref_len += o.ref_len;
    }

    /// The score (0–100) with `exp` smoothing; `effective_order` as sentence BLEU uses it.
    pub fn score(&self, effective_order: bool) -> Bleu {
        let bp = if self.sys_len >= self.ref_len {
            1.0
        } else if self.sys_len > 0 {
            (1.0 - self.ref_len as f64 / self.sys_len as f64).exp()
        } else {
            0.0
        };
        let mut precisions = [0.0f64; 4];
        if self.counts.iter().all(|&c| c == 0) {
            return Bleu { score: 0.0, precisions, bp };
        }
        let mut eff_order = 4;
        let mut smooth = 1.0;
        for n in 1..=4 {
            if self.totals[n - 1] == 0 {
                break;
            }
            if effective_order {
                eff_order = n;
            }
            if self.counts[n - 1] == 0 {
                smooth *= 2.0;
                precisions[n - 1] = 100.0 / (smooth * self.totals[n - 1] as f64);
            } else {
                precisions[n - 1] = 100.0 * self.counts[n - 1] as f64 / self.totals[n - 1] as f64;
            }
        }
        // sacrebleu's my_log(0) = -9999999999.
        let log = |p: f64| if p == 0.0 { -9_999_999_999.0 } else { p.ln() };
        let score = bp * (precisions[..eff_order].iter().map(|&p| log(p)).sum::<f64>() / eff_order as f64).exp();
        Bleu { score, precisions, bp }
    }
}

/// A BLEU score with its parts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bleu {
    pub score: f64,
    pub precisions: [f64; 4],
    pub bp: f64,
}

/// `sacrebleu.sentence_bleu(hyp, [ref])`.
pub fn sentence_bleu(hypothesis: &str, reference: &str) -> Bleu {
    BleuStats::of(hypothesis, reference).score(true)
}

/// `sacrebleu.corpus_bleu(hyps, [refs])`.
pub fn corpus_bleu(pairs: &[(&str, &str)]) -> Bleu {
    let mut st = BleuStats::default();
    for (h, r) in pairs {
        st.add(&BleuStats::of(h, r));
    }
    st.score(false)
}

/// rouge-score's tokens: lower-case, every run outside `[a-z0-9]` is a separator.
pub fn rouge_tokens(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    lower.split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit())).filter(|t| !t.is_empty()).map(str::to_string).collect()
}

/// ROUGE-L (precision, recall, F1) of `prediction` against `target`.
pub fn rouge_l(target: &str, prediction: &str) -> (f64, f64, f64) {
    let (t, p) = (rouge_tokens(target), rouge_tokens(prediction));
    if t.is_empty() || p.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let mut prev = vec![0usize; p.len() + 1];
    let mut cur = vec![0usize; p.len() + 1];
    for a in &t {
        for (j, b) in p.iter().enumerate() {
            cur[j + 1] = if a == b { prev[j] + 1 } else { prev[j + 1].max(cur[j]) };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    let lcs = prev[p.len()] as f64;
    let (precision, recall) = (lcs / p.len() as f64, lcs / t.len() as f64);
    let f1 = if precision + recall > 0.0 { 2.0 * precision * recall / (precision + recall) } else { 0.0 };
    (precision, recall, f1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::test_support::{f64s, fixture, i64s};
    use arrow::array::{Array, AsArray};

    #[test]
    fn hand_cases() {
        assert_eq!(tokenize_13a("Hello, world! It's 3.5 &amp; 1,000 - x-y 5-6."), "Hello , world ! It's 3.5 & 1,000 - x-y 5 - 6 .");
        let b = sentence_bleu("the cat sat on the mat", "the cat sat on the mat");
        assert!((b.score - 100.0).abs() < 1e-12);
        // LCS of "a b c d" and "a c d e" is 3.
        let (p, r, f) = rouge_l("a b c d", "a c d e");
        assert!((p - 0.75).abs() < 1e-15 && (r - 0.75).abs() < 1e-15 && (f - 0.75).abs() < 1e-15);
        assert_eq!(rouge_tokens("Café AU-lait, 2x!"), ["caf", "au", "lait", "2x"]);
    }

    #[test]
    fn text_metrics_match_sacrebleu_and_rouge_score_fixture() -> Result<(), Box<dyn std::error::Error>> {
        let dir = fixture("text_metrics");
        let pairs = tgrag_schemas::io::read_parquet(&dir.join("pairs.parquet"))?;
        let scores = tgrag_schemas::io::read_parquet(&dir.join("sentence_scores.parquet"))?;
        let corpus = tgrag_schemas::io::read_parquet(&dir.join("corpus_bleu.parquet"))?;
        let s = |name: &str| -> Result<Vec<String>, Box<dyn std::error::Error>> {
            let c = pairs.column_by_name(name).ok_or(name.to_string())?.as_string::<i32>();
            Ok((0..c.len()).map(|i| c.value(i).to_string()).collect())
        };
        let (hyp, refs, hyp13, ref13, hypr) = (s("hypothesis")?, s("reference")?, s("hyp_13a")?, s("ref_13a")?, s("hyp_rouge_tokens")?);
        assert_eq!(i64s(&pairs, "pair_id")?, i64s(&scores, "pair_id")?);
        let bleu = f64s(&scores, "bleu")?;
        let bp = f64s(&scores, "bp")?;
        let counts: Vec<Vec<i64>> = (1..=4).map(|n| i64s(&scores, &format!("counts_{n}"))).collect::<Result<_, _>>()?;
        let totals: Vec<Vec<i64>> = (1..=4).map(|n| i64s(&scores, &format!("totals_{n}"))).collect::<Result<_, _>>()?;
        let prec: Vec<Vec<f64>> = (1..=4).map(|n| f64s(&scores, &format!("precision_{n}"))).collect::<Result<_, _>>()?;
        let (rp, rr, rf) = (f64s(&scores, "rougeL_precision")?, f64s(&scores, "rougeL_recall")?, f64s(&scores, "rougeL_f1")?);
        for i in 0..hyp.len() {
            assert_eq!(tokenize_13a(hyp[i].trim_end()), hyp13[i], "13a of pair {i}: {:?}", hyp[i]);
            assert_eq!(tokenize_13a(refs[i].trim_end()), ref13[i], "13a of pair {i} reference");
            assert_eq!(rouge_tokens(&hyp[i]).join(" "), hypr[i], "rouge tokens of pair {i}");
            let st = BleuStats::of(&hyp[i], &refs[i]);
            for n in 0..4 {
                assert_eq!((st.counts[n] as i64, st.totals[n] as i64), (counts[n][i], totals[n][i]), "pair {i} order {}", n + 1);
            }
            let b = st.score(true);
            assert!((b.score - bleu[i]).abs() < 1e-9, "pair {i}: BLEU {} vs {}", b.score, bleu[i]);
            assert!((b.bp - bp[i]).abs() < 1e-12);
            for (n, want) in prec.iter().enumerate() {
                assert!((b.precisions[n] - want[i]).abs() < 1e-9, "pair {i} precision {}", n + 1);
            }
            let (p, r, f) = rouge_l(&refs[i], &hyp[i]);
            assert!((p - rp[i]).abs() < 1e-12 && (r - rr[i]).abs() < 1e-12 && (f - rf[i]).abs() < 1e-12, "pair {i}: ROUGE-L");
        }
        let all: Vec<(&str, &str)> = hyp.iter().zip(&refs).map(|(h, r)| (h.as_str(), r.as_str())).collect();
        let c = corpus_bleu(&all);
        let want = f64s(&corpus, "bleu")?[0];
        assert!((c.score - want).abs() < 1e-9, "corpus BLEU {} vs {want}", c.score);
        Ok(())
    }
}
