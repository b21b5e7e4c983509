//! Tokenisation for lexical retrieval. The default follows bm25s: lower-case, tokens matching
//! `(?u)\b\w\w+\b`, English stop words removed.

use serde::{Deserialize, Serialize};

/// Which tokeniser to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
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
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of", "on", "or", "such",
    "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with",
];

/// A word character of Python's `(?u)\w`: letters, digits and `_`.
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Calls `f` with every token of `text`, in order, without allocating a string per token: the
/// lower-cased text goes into `buf` (reused across calls) and tokens are slices of it.
/// Same tokens as [`tokenize`].
pub fn for_each_token(text: &str, kind: TokenizerKind, buf: &mut String, mut f: impl FnMut(&str)) {
    buf.clear();
    if text.is_ascii() {
        buf.push_str(text);
        buf.make_ascii_lowercase();
    } else {
        // `to_lowercase` is context-sensitive (final sigma), so the whole text is lowered at once.
        buf.push_str(&text.to_lowercase());
    }
    match kind {
        TokenizerKind::Bm25s => {
            for t in buf.split(|c: char| !is_word(c)) {
                if t.chars().nth(1).is_some() && !STOPWORDS_EN.contains(&t) {
                    f(t);
                }
            }
        }
        TokenizerKind::Simple => {
            for t in buf.split(|c: char| !c.is_alphanumeric()) {
                if !t.is_empty() {
                    f(t);
                }
            }
        }
    }
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
        TokenizerKind::Simple => lower.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).map(str::to_string).collect(),
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

    #[test]
    fn visitor_gives_the_same_tokens_as_tokenize() {
        let texts = ["The USB-C port, a 2x faster hub!", "ΣΟΦΟΣ Straße x² snake_case", "", "a I", "Ünïcode and ASCII mixed: ÀB cd"];
        let mut buf = String::new();
        for kind in [TokenizerKind::Bm25s, TokenizerKind::Simple] {
            for t in texts {
                let mut got = Vec::new();
                for_each_token(t, kind, &mut buf, |x| got.push(x.to_string()));
                assert_eq!(got, tokenize(t, kind), "{t:?} {kind:?}");
            }
        }
    }
}
