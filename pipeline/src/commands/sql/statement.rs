//! Checks on the statement text and its syntax tree before DataFusion plans it: queries only, and a
//! bounded nesting depth (DataFusion's planner and optimizer recurse once per level: a left-deep
//! chain of 100,000 `+` would overflow any stack).

use std::ops::ControlFlow;

use anyhow::Result;
use datafusion::sql::parser::{CopyToSource, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{Expr, Query, Visit, Visitor};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// The statements `tgrag sql` runs: queries only.
const READ_ONLY: [&str; 7] = ["select", "with", "values", "explain", "show", "describe", "desc"];

/// The deepest nesting of expressions and subqueries a statement may have. DataFusion plans it
/// on a thread with a large stack (`super::STACK_BYTES`); this bound keeps far inside it.
pub const MAX_DEPTH: usize = 2000;

/// The first word of a statement, past whitespace, comments (`-- …`, `/* … */`) and opening
/// parentheses; `None` for a statement with no word.
fn first_word(query: &str) -> Option<String> {
    let tokens = Tokenizer::new(&GenericDialect {}, query).tokenize().ok();
    if let Some(tokens) = tokens {
        return tokens
            .into_iter()
            .find(|t| !matches!(t, Token::Whitespace(_) | Token::LParen))
            .and_then(|t| if let Token::Word(w) = t { Some(w.value) } else { None });
    }
    // Text the tokenizer refuses (an unterminated string, say): skip what can be skipped by hand,
    // DataFusion's parser reports the rest.
    let mut rest = query;
    loop {
        let t = rest.trim_start().trim_start_matches('(').trim_start();
        if let Some(after) = t.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(after) = t.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r);
        } else {
            let w: String = t.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
            return (!w.is_empty()).then_some(w);
        }
    }
}

/// Refuses anything but a query before DataFusion parses it (DataFusion's plan check follows).
pub fn check_read_only(query: &str) -> Result<()> {
    let first = first_word(query);
    if first.as_deref().is_some_and(|w| READ_ONLY.contains(&w.to_ascii_lowercase().as_str())) {
        return Ok(());
    }
    let shown = match &first {
        Some(w) => w.chars().take(40).collect::<String>(),
        None if query.trim().is_empty() || is_only_comments(query) => "empty".into(),
        None => "that".into(),
    };
    bail_config!("`tgrag sql` is read-only: `{shown}` statements are refused (allowed: SELECT, WITH, VALUES, EXPLAIN, SHOW, DESCRIBE)")
}

/// Whether the text holds nothing but whitespace, comments and `;`.
fn is_only_comments(query: &str) -> bool {
    Tokenizer::new(&GenericDialect {}, query)
        .tokenize()
        .is_ok_and(|t| t.iter().all(|t| matches!(t, Token::Whitespace(_) | Token::SemiColon | Token::EOF)))
}

/// Counts the nesting of expressions and queries while the syntax tree is walked.
#[derive(Default)]
struct Depth {
    now: usize,
    deepest: usize,
}

impl Depth {
    fn enter(&mut self) -> ControlFlow<()> {
        self.now += 1;
        self.deepest = self.deepest.max(self.now);
        if self.now > MAX_DEPTH { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    }

    fn leave(&mut self) -> ControlFlow<()> {
        self.now = self.now.saturating_sub(1);
        ControlFlow::Continue(())
    }
}

impl Visitor for Depth {
    type Break = ();

    fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.enter()
    }

    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
        self.leave()
    }

    fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
        self.enter()
    }

    fn post_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
        self.leave()
    }
}

/// Refuses a statement nested deeper than [`MAX_DEPTH`] (walked on the caller's stack: call it on
/// the large-stack thread).
pub fn check_depth(statement: &DfStatement) -> Result<()> {
    let mut depth = Depth::default();
    let flow = match statement {
        DfStatement::Statement(s) => s.visit(&mut depth),
        DfStatement::Explain(e) => return check_depth(&e.statement),
        DfStatement::CopyTo(c) => match &c.source {
            CopyToSource::Query(q) => q.visit(&mut depth),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        _ => ControlFlow::Continue(()),
    };
    if flow.is_break() {
        bail_config!(
            "the statement nests expressions or subqueries more than {MAX_DEPTH} deep (a chain of {MAX_DEPTH} `+`, `OR` or `AND` \
             is that deep): split it, or use `IN (…)` for long lists of alternatives"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_queries_pass_the_first_word_check() {
        for q in [
            "SELECT 1",
            "  select 1",
            "(SELECT 1)",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "EXPLAIN SELECT 1",
            "SHOW TABLES",
            "DESCRIBE t",
            "VALUES (1)",
            "/* c */ SELECT 1",
            "-- c\nSELECT 1",
            "/* a */ -- b\n ( /* c */ select 1)",
            "/* unterminated 'string */ SELECT 'x",
        ] {
            assert!(check_read_only(q).is_ok(), "{q}");
        }
        for (q, word) in [
            ("COPY (SELECT 1) TO '/tmp/x' STORED AS CSV", "COPY"),
            ("CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'", "CREATE"),
            ("DROP TABLE t", "DROP"),
            ("SET x = 1", "SET"),
            ("INSERT INTO t VALUES (1)", "INSERT"),
            ("/* SELECT */ DROP TABLE t", "DROP"),
            ("-- SELECT\nINSERT INTO t VALUES (1)", "INSERT"),
            ("", "empty"),
            (";", "empty"),
            ("/* only a comment */", "empty"),
            ("1 + 1", "that"),
        ] {
            let e = check_read_only(q).expect_err(q).to_string();
            assert!(e.contains("read-only") && e.contains(&format!("`{word}`")), "{q}: {e}");
        }
    }
}
