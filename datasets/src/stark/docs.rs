//! `get_doc_info(idx, add_rel=False, compact=False)` of AmazonSKB, MagSKB and PrimeSKB, byte for
//! byte (f-strings print values with Python's `str()`, see [`crate::pyrepr`]).

use super::{Kb, Skb};
use crate::pickle::Value;
use crate::pyrepr::py_str;

/// AmazonSKB's `max_entries`: reviews and Q&As stop after entry index 26 (the loop breaks *after*
/// printing entry `i` once `i > 25`, so 27 are printed).
const MAX_ENTRIES: usize = 25;

impl Skb {
    /// The node's document as the STaRK loader writes it.
    pub fn doc(&self, i: usize) -> String {
        match self.kb {
            Kb::Amazon => self.amazon_doc(i),
            Kb::Mag => self.mag_doc(i),
            Kb::Prime => self.prime_doc(i),
        }
    }

    fn s(&self, i: usize, key: &str) -> String {
        self.attr(i, key).map(py_str).unwrap_or_default()
    }

    fn amazon_doc(&self, i: usize) -> String {
        match self.node_type(i) {
            "brand" => return format!("brand name: {}", self.s(i, "brand_name")),
            "category" => return format!("category name: {}", self.s(i, "category_name")),
            "color" => return format!("color name: {}", self.s(i, "color_name")),
            _ => {}
        }
        let doc = self.amazon_product(i);
        let feature_text = self.amazon_features(i);
        let review_text = self.amazon_reviews(i);
        let qa_text = self.amazon_qa(i);
        doc + &feature_text + &review_text + &qa_text
    }

    /// A product's title, brand, dimensions and weight, and description lines.
    fn amazon_product(&self, i: usize) -> String {
        let mut doc = format!("- product: {}\n", self.s(i, "title"));
        if self.attr(i, "brand").is_some() {
            doc += &format!("- brand: {}\n", self.s(i, "brand"));
        }
        // `dimensions, weight = details.product_dimensions.split(' ; ')` inside a bare `try`: only
        // a value with exactly two parts prints; anything else (no details, nan, one or three
        // parts) is silently skipped.
        if let Some(Value::Dict(_)) = self.attr(i, "details").map(Value::plain)
            && let Some(pd) = self.attr(i, "details").and_then(|d| d.get("product_dimensions")).and_then(Value::as_str)
        {
            let parts: Vec<&str> = pd.split(" ; ").collect();
            if let [dimensions, weight] = parts.as_slice() {
                doc += &format!("- dimensions: {dimensions}\n- weight: {weight}\n");
            }
        }
        if let Some(Value::List(d)) = self.attr(i, "description").map(Value::plain)
            && !d.is_empty()
        {
            let joined = d.iter().map(py_str).collect::<Vec<_>>().join(" ");
            let description = joined.trim_matches(' ');
            if !description.is_empty() {
                doc += &format!("- description: {description}\n");
            }
        }
        doc
    }

    /// `- features: ` and the numbered features that do not mention `asin`; empty without features.
    fn amazon_features(&self, i: usize) -> String {
        let mut feature_text = String::new();
        if let Some(Value::List(f)) = self.attr(i, "feature").map(Value::plain)
            && !f.is_empty()
        {
            feature_text = "- features: \n".into();
            for (k, feature) in f.iter().enumerate() {
                let text = py_str(feature);
                if !text.is_empty() && !python_lower(&text).contains("asin") {
                    feature_text += &format!("#{}: {text}\n", k + 1);
                }
            }
        }
        feature_text
    }

    /// `- reviews: ` and the reviews by descending votes, at most `MAX_ENTRIES + 2`; empty without
    /// reviews.
    fn amazon_reviews(&self, i: usize) -> String {
        let mut review_text = String::new();
        if let Some(Value::List(reviews)) = self.attr(i, "review").map(Value::plain)
            && !reviews.is_empty()
        {
            review_text = "- reviews: \n".into();
            let scores: Vec<i64> = reviews
                .iter()
                .map(|r| match r.get("vote").map(Value::plain) {
                    Some(Value::Str(v)) => v.replace(',', "").trim().parse().unwrap_or(0),
                    Some(Value::Int(v)) => *v,
                    _ => 0,
                })
                .collect();
            // np.argsort(-scores); the fixtures keep votes distinct, ties fall back to index order.
            let mut ranks: Vec<usize> = (0..reviews.len()).collect();
            ranks.sort_by_key(|&k| (-scores[k], k));
            for (n, &k) in ranks.iter().enumerate() {
                let r = &reviews[k];
                let g = |key: &str| r.get(key).map(py_str).unwrap_or_default();
                review_text += &format!("#{}:\nsummary: {}\ntext: \"{}\"\n", k + 1, g("summary"), g("reviewText"));
                if n > MAX_ENTRIES {
                    break;
                }
            }
        }
        review_text
    }

    /// `- Q&A: ` and the questions with their answers, at most `MAX_ENTRIES + 2`; empty without any.
    fn amazon_qa(&self, i: usize) -> String {
        let mut qa_text = String::new();
        if let Some(Value::List(qas)) = self.attr(i, "qa").map(Value::plain)
            && !qas.is_empty()
        {
            qa_text = "- Q&A: \n".into();
            for (k, q) in qas.iter().enumerate() {
                let g = |key: &str| q.get(key).map(py_str).unwrap_or_default();
                qa_text += &format!("#{}:\nquestion: \"{}\"\nanswer: \"{}\"\n", k + 1, g("question"), g("answer"));
                if k > MAX_ENTRIES {
                    break;
                }
            }
        }
        qa_text
    }

    fn mag_doc(&self, i: usize) -> String {
        let int = |key: &str| self.attr(i, key).and_then(Value::as_int);
        let counts = |doc: &mut String, kind: &str| {
            if int("PaperCount") != Some(-1) {
                *doc += &format!("- {kind} paper count: {}\n", self.s(i, "PaperCount"));
            }
            if int("CitationCount") != Some(-1) {
                *doc += &format!("- {kind} citation count: {}\n", self.s(i, "CitationCount"));
            }
        };
        // Authors, fields of study and institutions share one shape: a name line, the known
        // counts, then `-1` replaced by `Unknown` across the whole text (MPEG-1 → MPEGUnknown).
        let named = |head: &str, kind: &str| {
            let mut doc = format!("{head}{}\n", self.s(i, "DisplayName"));
            counts(&mut doc, kind);
            doc.replace("-1", "Unknown")
        };
        match self.s(i, "type").as_str() {
            "author" => named("- author name: ", "author"),
            "field_of_study" => named(" - field of study: ", "field"),
            "institution" => named(" - institution: ", "institution"),
            "paper" => {
                let mut doc = format!(" - paper title: {}\n", self.s(i, "title"));
                let abs = self.s(i, "abstract").replace('\r', "");
                doc += &format!(" - abstract: {}\n", abs.trim_end_matches('\n'));
                if self.s(i, "Date") != "-1" {
                    doc += &format!(" - publication date: {}\n", self.s(i, "Date"));
                }
                // The first venue field that is set, in MagSKB's order.
                let venues = [
                    ("OriginalVenue", "venue"),
                    ("JournalDisplayName", "journal"),
                    ("ConferenceSeriesDisplayName", "conference"),
                    ("ConferenceInstancesDisplayName", "conference"),
                ];
                if let Some((key, label)) = venues.iter().find(|(k, _)| self.s(i, k) != "-1") {
                    doc += &format!(" - {label}: {}\n", self.s(i, key));
                }
                doc
            }
            // MagSKB leaves `doc` unbound for any other type (a NameError); no such node exists.
            _ => String::new(),
        }
    }

    fn prime_doc(&self, i: usize) -> String {
        let mut doc = format!("- name: {}\n- type: {}\n- source: {}\n", self.s(i, "name"), self.s(i, "type"), self.s(i, "source"));
        let is_gene = self.s(i, "type") == "gene/protein";
        let mut feature_text = String::from("- details:\n");
        let mut count = 0;
        if let Some(Value::Dict(details)) = self.attr(i, "details").map(Value::plain) {
            for (k, value) in details {
                let key = py_str(k);
                let sv = py_str(value);
                if sv.is_empty() || sv == "nan" || key.starts_with('_') || key.contains("_id") {
                    continue;
                }
                match (is_gene, gene_explain(&key)) {
                    (true, Some(explain)) => {
                        let shown = match key.as_str() {
                            "interpro" => {
                                let items: Vec<Value> = match value.plain() {
                                    Value::List(l) => l.clone(),
                                    d => vec![d.clone()],
                                };
                                py_str(&Value::List(items.iter().map(|v| v.get("desc").cloned().unwrap_or(Value::None)).collect()))
                            }
                            "generif" => {
                                let texts: Vec<String> = match value.plain() {
                                    Value::List(l) => l.iter().map(|v| v.get("text").map(py_str).unwrap_or_default()).collect(),
                                    _ => Vec::new(),
                                };
                                let joined = texts.join("; ");
                                joined.split(' ').take(50_000).collect::<Vec<_>>().join(" ")
                            }
                            "genomic_pos" => match value.plain() {
                                Value::List(l) if !l.is_empty() => py_str(&l[0]),
                                v => py_str(v),
                            },
                            _ => sv,
                        };
                        feature_text += &format!("  - {key} ({explain}): {shown}\n");
                    }
                    _ => feature_text += &format!("  - {key}: {sv}\n"),
                }
                count += 1;
            }
        }
        if count > 0 {
            doc += &feature_text;
        }
        doc
    }
}

fn gene_explain(key: &str) -> Option<&'static str> {
    Some(match key {
        "name" => "gene name",
        "type_of_gene" => "gene types",
        "alias" => "other gene names",
        "other_names" => "extended other gene names",
        "genomic_pos" => "genomic position",
        "generif" => "PubMed text",
        "interpro" => "protein family and classification information",
        "summary" => "protein summary text",
        _ => return None,
    })
}

/// Python's `str.lower()` (full Unicode lowercasing, like Rust's).
fn python_lower(s: &str) -> String {
    s.to_lowercase()
}
