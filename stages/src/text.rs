//! Tokenisation for lexical retrieval. The default follows bm25s: lower-case, tokens matching
//! `(?u)\b\w\w+\b`, English stop words removed.

use serde::{Deserialize, Serialize};

/// Which tokeniser to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TokenizerKind {
    /// bm25s' default: lower-case, `\w\w+`, English stop words removed.
    #[default]
    Bm25s,
    /// Lower-case, split on every character that is not a letter or digit, keep every non-empty
    /// token (the tokenizer of the shared BM25 fixture).
    Simple,
}

/// English stop words of bm25s (`bm25s.stopwords.STOPWORDS_EN`).
pub const STOPWORDS_EN: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no",
    "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this",
    "to", "was", "will", "with",
];

/// A word character of Python's `(?u)\w`: letters, digits and `_`.
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Splits `text` into tokens. `(?u)\b\w\w+\b` matches exactly the maximal runs of word characters
/// that are at least two characters long, which is how it is computed here.
pub fn tokenize(text: &str, kind: TokenizerKind) -> Vec<String> {
    let lower = text.to_lowercase();
    match kind {
        TokenizerKind::Bm25s => lower
            .split(|c: char| !is_word(c))
            .filter(|t| t.chars().nth(1).is_some() && !STOPWORDS_EN.contains(t))
            .map(str::to_string)
            .collect(),
        TokenizerKind::Simple => {
            lower.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).map(str::to_string).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_single_characters_punctuation_and_stop_words() {
        assert_eq!(tokenize("The USB-C port, a 2x faster hub!", TokenizerKind::Bm25s), vec!["usb", "port", "2x", "faster", "hub"]);
        assert_eq!(tokenize("snake_case x9 a-b 42", TokenizerKind::Bm25s), vec!["snake_case", "x9", "42"]);
        // The fixture tokenizer's own examples.
        assert_eq!(tokenize("os.path.join()", TokenizerKind::Simple), vec!["os", "path", "join"]);
        assert_eq!(tokenize("Snake_case", TokenizerKind::Simple), vec!["snake", "case"]);
        assert_eq!(tokenize("x² a", TokenizerKind::Simple), vec!["x²", "a"]);
        assert_eq!(tokenize("Café naïve", TokenizerKind::Simple), vec!["café", "naïve"]);
    }
}
