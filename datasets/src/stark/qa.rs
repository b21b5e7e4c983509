//! STaRK QA files: `stark_qa.csv` (`id,query,answer_ids`), the human-generated set
//! (`…,answer_ids_source`) and the split files (`train|val|test|test-0.1.index`: one query id per
//! line). As `load_qa`: rows ordered by id, splits mapped to positions in that order.

use std::path::Path;

use super::Kb;
use crate::error::{DatasetError, Result};

/// The split files `get_idx_split()` reads (all must exist).
pub const SPLIT_FILES: [&str; 4] = ["train", "val", "test", "test-0.1"];

/// One QA row.
#[derive(Debug, Clone, PartialEq)]
pub struct QaRow {
    pub id: i64,
    pub query: String,
    pub answer_ids: Vec<i64>,
    /// Human-generated set only (`answer_ids_source`).
    pub source_ids: Option<Vec<i64>>,
}

/// A QA set in id order, with its splits as positions.
#[derive(Debug, Clone)]
pub struct Qa {
    pub rows: Vec<QaRow>,
    pub splits: Vec<(String, Vec<usize>)>,
}

impl Qa {
    /// `load_qa(kb)` (`human=false`) or `load_qa(kb, human_generated_eval=True)`.
    pub fn load(kb: Kb, root: &Path, human: bool) -> Result<Self> {
        Self::load_dir(&root.join(format!("qa/{}", kb.name())), human)
    }

    /// The same from one KB's QA folder (`stark_qa/`, `split/`), as in the STaRK git history layout.
    /// `test-0.1.index` is optional (older copies lack it); the other split files are required.
    pub fn load_dir(dir: &Path, human: bool) -> Result<Self> {
        let file = if human { "stark_qa_human_generated_eval.csv" } else { "stark_qa.csv" };
        let path = dir.join("stark_qa").join(file);
        let records = crate::raw::read_records(&path, b',')?;
        let Some(header) = records.first() else { return Err(DatasetError::malformed(&path, "header", "empty file")) };
        let col = |name: &str| header.iter().position(|h| h == name).ok_or_else(|| crate::raw::missing_column(&path, name, header));
        let (ci, cq, ca) = (col("id")?, col("query")?, col("answer_ids")?);
        let cs = if human { Some(col("answer_ids_source")?) } else { None };
        let mut rows = Vec::with_capacity(records.len() - 1);
        for (r, rec) in records.iter().enumerate().skip(1) {
            let at = |c: &str| format!("row {}, column {c}", r - 1);
            let field = |c: usize, name: &str| rec.get(c).ok_or_else(|| DatasetError::malformed(&path, at(name), "missing value"));
            let id = field(ci, "id")?
                .trim()
                .parse::<i64>()
                .map_err(|e| DatasetError::malformed(&path, at("id"), format!("not an integer: {e}")))?;
            let query = field(cq, "query")?.clone();
            let answer_ids = parse_int_list(field(ca, "answer_ids")?).map_err(|e| DatasetError::malformed(&path, at("answer_ids"), e))?;
            let source_ids = match cs {
                Some(c) => Some(
                    parse_int_list(field(c, "answer_ids_source")?)
                        .map_err(|e| DatasetError::malformed(&path, at("answer_ids_source"), e))?,
                ),
                None => None,
            };
            rows.push(QaRow { id, query, answer_ids, source_ids });
        }
        rows.sort_by_key(|r| r.id);
        if let Some(w) = rows.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(DatasetError::malformed(&path, "column id", format!("duplicate query id {}", w[0].id)));
        }
        let splits = if human {
            vec![("human_generated_eval".to_string(), (0..rows.len()).collect())]
        } else {
            let mut splits = Vec::new();
            for s in SPLIT_FILES {
                let p = dir.join("split").join(format!("{s}.index"));
                if s == "test-0.1" && !p.exists() {
                    continue;
                }
                let text = read_utf8(&p)?;
                let mut positions = Vec::new();
                for (line_no, line) in text.lines().enumerate() {
                    if line.trim().is_empty() {
                        continue;
                    }
                    let id: i64 = line
                        .trim()
                        .parse()
                        .map_err(|e| DatasetError::malformed(&p, format!("line {}", line_no + 1), format!("not a query id: {e}")))?;
                    let pos = rows.binary_search_by_key(&id, |r| r.id).map_err(|_| {
                        DatasetError::malformed(&p, format!("line {}", line_no + 1), format!("query id {id} is not in stark_qa.csv"))
                    })?;
                    positions.push(pos);
                }
                splits.push((s.to_string(), positions));
            }
            splits
        };
        Ok(Qa { rows, splits })
    }
}

/// `eval(answer_ids)` for the only shape these files hold: a list of ints, `[1, 2]`.
fn parse_int_list(s: &str) -> std::result::Result<Vec<i64>, String> {
    let t = s.trim();
    let inner =
        t.strip_prefix('[').and_then(|x| x.strip_suffix(']')).ok_or_else(|| format!("`{}` is not a list of ids", crate::raw::quote(t)))?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| x.parse::<i64>().map_err(|e| format!("`{}` in `{}` is not an integer: {e}", crate::raw::quote(x), crate::raw::quote(t))))
        .collect()
}

pub use crate::raw::parse_csv;
use crate::raw::read_utf8;
