//! Enron e-mail (raw RFC 822 messages, the Kaggle `emails.csv` layout `file,message`) into a people
//! graph: one `tag_nodes` row per address (in order of first appearance: From, then To, then Cc of
//! each message), one `tag_edges` row per distinct sender → recipient pair (self-sends dropped), and
//! every message in `emails` with its sender, recipients, Unix time, subject and body.
//! A person's text is the bodies of the e-mails they sent, separated by blank lines (empty for people
//! who only receive).
//!
//! Headers are read as Python's `email.message_from_string` does for these files: the first
//! occurrence of a header wins, folded lines are joined, the body is everything after the first blank
//! line. Address lists are split on commas, with folding whitespace removed.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Int64Array, ListBuilder, UInt32Builder};

use crate::DatasetTables;
use crate::error::{DatasetError, Result};
use crate::raw::{Csv, Tables, opt_strs, strs, u32s};
use tgrag_schemas::tables;

/// One parsed message.
#[derive(Debug, Clone, PartialEq)]
pub struct Email {
    pub file: String,
    pub from: String,
    pub to: Vec<String>,
    pub cc: Vec<String>,
    pub subject: String,
    pub date: Option<i64>,
    pub body: String,
}

/// Headers (first occurrence of each, names lower-cased, folded lines joined) and the body.
pub fn split_message(msg: &str) -> (HashMap<String, String>, &str) {
    let (head, body) = match msg.find("\n\n") {
        Some(i) => (&msg[..i], &msg[i + 2..]),
        None => (msg, ""),
    };
    let mut headers: HashMap<String, String> = HashMap::new();
    let mut current: Option<(String, String)> = None;
    let flush = |c: Option<(String, String)>, h: &mut HashMap<String, String>| {
        if let Some((k, v)) = c {
            h.entry(k).or_insert(v);
        }
    };
    for line in head.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = current.as_mut() {
                v.push('\n');
                v.push_str(line);
            }
            continue;
        }
        flush(current.take(), &mut headers);
        if let Some((k, v)) = line.split_once(':') {
            current = Some((k.trim().to_ascii_lowercase(), v.trim_start().to_string()));
        }
    }
    flush(current, &mut headers);
    (headers, body)
}

/// A To/Cc header split into addresses.
pub fn addresses(v: Option<&String>) -> Vec<String> {
    let Some(v) = v else { return Vec::new() };
    v.replace(['\n', '\t'], " ").split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_string).collect()
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// An RFC 2822 date (`Tue, 19 Feb 2002 15:00:45 -0800 (PST)`) as Unix seconds; `None` when the
/// header does not have that shape.
pub fn parse_date(s: &str) -> Option<i64> {
    let s = s.split_once(',').map_or(s, |(_, rest)| rest);
    let mut it = s.split_whitespace();
    let day: i64 = it.next()?.parse().ok()?;
    let mon = it.next()?;
    let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        .iter()
        .position(|m| m.eq_ignore_ascii_case(mon))? as i64
        + 1;
    let year: i64 = it.next()?.parse().ok()?;
    let mut hms = it.next()?.split(':').map(|x| x.parse::<i64>());
    let (h, mi, sec) = (hms.next()?.ok()?, hms.next()?.ok()?, hms.next().unwrap_or(Ok(0)).ok()?);
    let zone = it.next()?;
    let (sign, digits) = match zone.as_bytes().first()? {
        b'+' => (1, &zone[1..]),
        b'-' => (-1, &zone[1..]),
        _ => return None,
    };
    if digits.len() != 4 {
        return None;
    }
    let z: i64 = digits.parse().ok()?;
    let offset = sign * ((z / 100) * 3600 + (z % 100) * 60);
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

/// Reads the `file,message` CSV; a message without a From header is an error naming its row.
pub fn read_csv(path: &Path) -> Result<Vec<Email>> {
    let csv = Csv::read(path)?;
    let (cf, cm) = (csv.col("file")?, csv.col("message")?);
    csv.rows
        .iter()
        .enumerate()
        .map(|(r, row)| {
            let (h, body) = split_message(&row[cm]);
            let from = h.get("from").map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
            let from =
                from.ok_or_else(|| DatasetError::malformed(path, format!("row {r}, column message"), "the message has no From header"))?;
            Ok(Email {
                file: row[cf].clone(),
                from,
                to: addresses(h.get("to")),
                cc: addresses(h.get("cc")),
                subject: h.get("subject").cloned().unwrap_or_default(),
                date: h.get("date").and_then(|d| parse_date(d)),
                body: body.to_string(),
            })
        })
        .collect()
}

/// The people graph of a set of e-mails.
#[derive(Debug, Clone)]
pub struct PeopleGraph {
    pub people: Vec<String>,
    pub edges: Vec<(u32, u32)>,
    pub emails: Vec<Email>,
    /// `(sender, recipients)` node ids per e-mail.
    pub ends: Vec<(u32, Vec<u32>)>,
    pub source: PathBuf,
}

impl PeopleGraph {
    pub fn build(emails: Vec<Email>, source: &Path) -> Self {
        let mut index: HashMap<String, u32> = HashMap::new();
        let mut people: Vec<String> = Vec::new();
        let mut id = |a: &str, people: &mut Vec<String>| -> u32 {
            *index.entry(a.to_string()).or_insert_with(|| {
                people.push(a.to_string());
                people.len() as u32 - 1
            })
        };
        let mut seen = HashSet::new();
        let mut edges = Vec::new();
        let mut ends = Vec::with_capacity(emails.len());
        for e in &emails {
            let s = id(&e.from, &mut people);
            let rec: Vec<u32> = e.to.iter().chain(&e.cc).map(|a| id(a, &mut people)).collect();
            for &r in &rec {
                if r != s && seen.insert((s, r)) {
                    edges.push((s, r));
                }
            }
            ends.push((s, rec));
        }
        PeopleGraph { people, edges, emails, ends, source: source.to_path_buf() }
    }

    /// Reads a `file,message` CSV and builds the graph.
    pub fn load(path: &Path) -> Result<Self> {
        Ok(Self::build(read_csv(path)?, path))
    }

    /// `tag_nodes`, `tag_edges` and `emails`.
    pub fn to_tables(&self) -> Result<DatasetTables> {
        let n = self.people.len();
        let mut texts = vec![String::new(); n];
        for (e, (s, _)) in self.emails.iter().zip(&self.ends) {
            let t = &mut texts[*s as usize];
            if !t.is_empty() {
                t.push_str("\n\n");
            }
            t.push_str(e.body.trim());
        }
        let mut t = Tables::new();
        t.push(
            &tables::TAG_NODES,
            &self.source,
            vec![
                u32s(0..n as u32),
                strs(texts.iter()),
                opt_strs(self.people.iter().map(|p| Some(p.as_str()))),
                opt_strs((0..n).map(|_| None::<&str>)),
                Arc::new(Int64Array::from(vec![None::<i64>; n])),
                opt_strs((0..n).map(|_| None::<&str>)),
            ],
        )?;
        t.push(&tables::TAG_EDGES, &self.source, vec![u32s(self.edges.iter().map(|e| e.0)), u32s(self.edges.iter().map(|e| e.1))])?;
        let mut rec = ListBuilder::new(UInt32Builder::new());
        for (_, r) in &self.ends {
            rec.values().append_slice(r);
            rec.append(true);
        }
        t.push(
            &tables::EMAILS,
            &self.source,
            vec![
                u32s(0..self.emails.len() as u32),
                strs(self.emails.iter().map(|e| e.file.as_str())),
                u32s(self.ends.iter().map(|e| e.0)),
                Arc::new(rec.finish()),
                Arc::new(Int64Array::from_iter(self.emails.iter().map(|e| e.date))),
                strs(self.emails.iter().map(|e| e.subject.as_str())),
                strs(self.emails.iter().map(|e| e.body.as_str())),
            ],
        )?;
        Ok(t.finish())
    }
}
