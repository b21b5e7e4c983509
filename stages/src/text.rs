//! Tokenisation for lexical retrieval. The default follows bm25s: lower-case, tokens matching
//! `(?u)\b\w\w+\b`, English stop words removed.

use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// Which tokeniser to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    /// bm25s' default: lower-case, `\w\w+`, English stop words removed.
    #[default]
    Bm25s,
    /// Lower-case, `\w\w+`, nothing removed.
    Simple,
}

/// English stop words of bm25s (`bm25s.stopwords.STOPWORDS_EN`).
pub const STOPWORDS_EN: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no",
    "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this",
    "to", "was", "will", "with",
];

fn word_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // The pattern is a constant; `Regex::new` cannot fail on it.
    RE.get_or_init(|| Regex::new(r"(?u)\b\w\w+\b").unwrap_or_else(|_| unreachable!("constant regex")))
}

/// Splits `text` into tokens.
pub fn tokenize(text: &str, kind: TokenizerKind) -> Vec<String> {
    let lower = text.to_lowercase();
    word_re()
        .find_iter(&lower)
        .map(|m| m.as_str())
        .filter(|t| kind == TokenizerKind::Simple || !STOPWORDS_EN.contains(t))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_single_characters_punctuation_and_stop_words() {
        assert_eq!(tokenize("The USB-C port, a 2x faster hub!", TokenizerKind::Bm25s), vec!["usb", "port", "2x", "faster", "hub"]);
        assert_eq!(tokenize("The cat", TokenizerKind::Simple), vec!["the", "cat"]);
        assert_eq!(tokenize("Café naïve", TokenizerKind::Simple), vec!["café", "naïve"]);
    }
}
