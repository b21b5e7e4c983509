//! The nightly report: `report.md` (Markdown, figures as files under `plots/`) and `report.html`
//! (the same document, self-contained: styles, a small table-sorting script and every figure
//! inlined, so that it opens anywhere without a network). Both are rendered from the night's tables
//! alone: the comparison with the previous night first, then the datasets, then one section per
//! dataset with every method's scores, its breakdowns and its figures, then timings and provenance.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Result;
use arrow::array::{ArrayRef, RecordBatch};
use tgrag_schemas::{columns, tables};

use crate::nightly::diff::{self, Compared, Status};
use crate::nightly::plots::Figure;

/// Everything a report is rendered from.
pub struct Night<'a> {
    pub stamp: &'a str,
    pub leaderboard: &'a RecordBatch,
    pub datasets: &'a RecordBatch,
    pub timings: &'a RecordBatch,
    pub compared: &'a [Compared],
    /// The previous night's folder name, when there was one.
    pub previous: Option<&'a str>,
    /// The previous night's timings (per dataset and stage totals), when there was one.
    pub previous_timings: Option<&'a RecordBatch>,
    pub provenance: &'a serde_json::Value,
    pub figures: &'a [Figure],
}

/// The leaderboard rows of one (dataset, source) as a `scores` batch (for the report sections of
/// the `report` stage).
fn scores_of(lb: &RecordBatch, dataset: &str, source: &str) -> Result<RecordBatch> {
    let (d, so) = (columns::strs(lb, "dataset")?, columns::strs(lb, "source")?);
    let mask =
        arrow::array::BooleanArray::from((0..lb.num_rows()).map(|i| d.value(i) == dataset && so.value(i) == source).collect::<Vec<_>>());
    let f = arrow::compute::filter_record_batch(lb, &mask)?;
    let cols: Vec<ArrayRef> = tables::SCORES
        .columns
        .iter()
        .map(|c| f.column_by_name(c.name).cloned().unwrap_or_else(|| Arc::new(arrow::array::NullArray::new(0))))
        .collect();
    Ok(tables::SCORES.batch(cols)?)
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{v:.4}"))
}

fn secs(s: f64) -> String {
    if s >= 120.0 { format!("{:.1} min", s / 60.0) } else { format!("{s:.1} s") }
}

/// Per (dataset, stage) total seconds of a timings table.
fn totals(t: &RecordBatch) -> Result<BTreeMap<(String, String), f64>> {
    let (d, st, ph, s) =
        (columns::strs(t, "dataset")?, columns::strs(t, "stage")?, columns::strs(t, "phase")?, columns::f64s(t, "seconds")?);
    Ok((0..t.num_rows())
        .filter(|&i| ph.value(i) == "total")
        .map(|i| ((d.value(i).to_string(), st.value(i).to_string()), s.value(i)))
        .collect())
}

/// The report as Markdown (figures referenced as `plots/<file>`).
pub fn markdown(n: &Night<'_>) -> Result<String> {
    let mut md = String::new();
    heading(&mut md, n)?;
    // The comparison first: what a reader of a nightly report looks for.
    writeln!(md, "## Compared with the previous night\n")?;
    match n.previous {
        None => writeln!(md, "This is the first night in this folder: nothing to compare with.\n")?,
        Some(p) => {
            comparison(&mut md, n, p)?;
            method_changes(&mut md, n)?;
            if let Some(pt) = n.previous_timings {
                stage_time(&mut md, pt, n.timings)?;
            }
        }
    }
    datasets_table(&mut md, n)?;
    dataset_sections(&mut md, n)?;
    timings_table(&mut md, n)?;
    writeln!(
        md,
        "\n# Provenance\n\n`provenance.json` has the whole record (stage configurations and their hashes, dataset revisions and file sha256s, host).\n"
    )?;
    Ok(md)
}

/// The title and the provenance line: commit, version, code digest, host, start and end.
fn heading(md: &mut String, n: &Night<'_>) -> Result<()> {
    writeln!(md, "# tgrag nightly {}\n", n.stamp)?;
    let code = &n.provenance["code"];
    let host = &n.provenance["host"];
    writeln!(
        md,
        "Commit `{}`{}, tgrag {}, code digest `{}`; {} ({} cores{}); {} → {}.\n",
        code["git_commit"].as_str().unwrap_or("unknown"),
        if code["git_dirty"].as_bool() == Some(true) { " (with uncommitted changes)" } else { "" },
        code["tgrag_version"].as_str().unwrap_or("?"),
        code["code_digest"].as_str().map_or_else(|| "?".to_string(), |d| d.chars().take(12).collect()),
        host["cpu"].as_str().unwrap_or("unknown CPU"),
        host["cores"].as_u64().unwrap_or(0),
        host["gpu"].as_str().map(|g| format!(", GPU {g}")).unwrap_or_default(),
        n.provenance["started_at"].as_str().unwrap_or("?"),
        n.provenance["finished_at"].as_str().unwrap_or("?"),
    )?;
    Ok(())
}

/// The counts by status against the previous night `p`, then the regressions and improvements.
fn comparison(md: &mut String, n: &Night<'_>, p: &str) -> Result<()> {
    writeln!(md, "Against `{p}`: {}.\n", diff::status_counts(n.compared, true))?;
    for (status, title) in [(Status::Regression, "Regressions"), (Status::Improvement, "Improvements")] {
        let all: Vec<&Compared> = n.compared.iter().filter(|r| r.status == status).collect();
        if !all.is_empty() {
            changes_table(md, title, &all)?;
        }
    }
    Ok(())
}

/// One table of regressions or improvements.
fn changes_table(md: &mut String, title: &str, all: &[&Compared]) -> Result<()> {
    // The overall rows in the table; breakdowns (by hops, pattern, …) counted, all of
    // them in regressions.parquet.
    let these: Vec<&Compared> = all.iter().copied().filter(|r| r.key.group == "*").collect();
    let broken_down = all.len() - these.len();
    writeln!(
        md,
        "### {title}\n\n| dataset | method | metric | split | group | previous | now | Δ | band |\n|---|---|---|---|---|---:|---:|---:|---:|"
    )?;
    for r in these {
        let k = &r.key;
        writeln!(
            md,
            "| {} | {}/{} | {} | {} | {} | {} | {} | {:+.4} | {:.4} ({}) |",
            k.dataset,
            k.source,
            k.method,
            k.metric,
            k.split,
            k.group,
            fmt_opt(r.previous),
            fmt_opt(r.current),
            r.delta().unwrap_or(0.0),
            r.tolerance,
            r.tolerance_from
        )?;
    }
    writeln!(md)?;
    if broken_down > 0 {
        writeln!(md, "And {broken_down} in breakdowns (by hops, pattern, model, …): all of them are in `regressions.parquet`.\n")?;
    }
    Ok(())
}

/// The methods that appeared or vanished since the previous night.
fn method_changes(md: &mut String, n: &Night<'_>) -> Result<()> {
    let prev_map: BTreeMap<diff::Key, f64> = n.compared.iter().filter_map(|r| r.previous.map(|v| (r.key.clone(), v))).collect();
    let cur_map: BTreeMap<diff::Key, f64> = n.compared.iter().filter_map(|r| r.current.map(|v| (r.key.clone(), v))).collect();
    let (new, gone) = diff::method_changes(&prev_map, &cur_map);
    for (list, word) in [(new, "New methods"), (gone, "Vanished methods")] {
        if !list.is_empty() {
            let items: Vec<String> = list.iter().map(|(d, s, m)| format!("`{m}` ({d}, {s})")).collect();
            writeln!(md, "{word}: {}.\n", items.join(", "))?;
        }
    }
    Ok(())
}

/// Stage time per dataset, previous night against this one.
fn stage_time(md: &mut String, previous: &RecordBatch, now: &RecordBatch) -> Result<()> {
    let (p, c) = (totals(previous)?, totals(now)?);
    let mut by_ds: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for ((d, _), s) in &p {
        by_ds.entry(d.as_str()).or_default().0 += s;
    }
    for ((d, _), s) in &c {
        by_ds.entry(d.as_str()).or_default().1 += s;
    }
    writeln!(md, "### Stage time (shown, never a failure)\n\n| dataset | previous | now | ratio |\n|---|---:|---:|---:|")?;
    for (d, (a, b)) in by_ds {
        let ratio = if a > 0.0 { format!("{:.2}×", b / a) } else { "—".into() };
        writeln!(md, "| {d} | {} | {} | {ratio} |", secs(a), secs(b))?;
    }
    writeln!(md)?;
    Ok(())
}

/// The datasets of the night: status, stages run and skipped, time, detail.
fn datasets_table(md: &mut String, n: &Night<'_>) -> Result<()> {
    writeln!(md, "## Datasets\n\n| dataset | status | stages run | stages skipped | time | detail |\n|---|---|---:|---:|---:|---|")?;
    let (dn, ds, dd, dr, dk, dsec) = (
        columns::strs(n.datasets, "dataset")?,
        columns::strs(n.datasets, "status")?,
        columns::strs(n.datasets, "detail")?,
        columns::u32s(n.datasets, "stages_ran")?,
        columns::u32s(n.datasets, "stages_skipped")?,
        columns::f64s(n.datasets, "seconds")?,
    );
    for i in 0..n.datasets.num_rows() {
        let status = match ds.value(i) {
            "failed" => "**failed**".to_string(),
            s => s.to_string(),
        };
        let detail = dd.value(i).replace('|', "\\|").replace('\n', " ");
        writeln!(md, "| {} | {status} | {} | {} | {} | {detail} |", dn.value(i), dr.value(i), dk.value(i), secs(dsec.value(i)))?;
    }
    writeln!(md)?;
    Ok(())
}

/// One section per dataset that produced scores: its bar charts, every source's scores (the
/// `metrics` source first), its other figures.
fn dataset_sections(md: &mut String, n: &Night<'_>) -> Result<()> {
    let (lbd, lbs) = (columns::strs(n.leaderboard, "dataset")?, columns::strs(n.leaderboard, "source")?);
    let mut order: Vec<(String, Vec<String>)> = Vec::new();
    for i in 0..n.leaderboard.num_rows() {
        let (d, s) = (lbd.value(i), lbs.value(i));
        match order.iter_mut().find(|x| x.0 == d) {
            Some(x) if !x.1.iter().any(|y| y == s) => x.1.push(s.to_string()),
            Some(_) => {}
            None => order.push((d.to_string(), vec![s.to_string()])),
        }
    }
    for (dataset, sources) in &order {
        writeln!(md, "# Dataset `{dataset}`\n")?;
        for f in n.figures.iter().filter(|f| &f.dataset == dataset && f.file.starts_with("bars-")) {
            writeln!(md, "![{}](plots/{})\n", f.caption, f.file)?;
        }
        let mut sources = sources.clone();
        sources.sort_by_key(|s| s != "metrics");
        for source in &sources {
            let scores = scores_of(n.leaderboard, dataset, source)?;
            let body = if source == "metrics" {
                tgrag_stages::evaluation::report::ranking_section(&scores)?
            } else {
                tgrag_stages::evaluation::report::stage_section(source, &scores)?
            };
            // One level deeper under the dataset heading.
            md.push_str(&body.replace("\n## ", "\n### "));
            md.push('\n');
        }
        for f in n.figures.iter().filter(|f| &f.dataset == dataset && !f.file.starts_with("bars-")) {
            writeln!(md, "![{}](plots/{})\n", f.caption, f.file)?;
        }
    }
    Ok(())
}

/// Where the time went: per dataset and stage, the total and whether it ran tonight.
fn timings_table(md: &mut String, n: &Night<'_>) -> Result<()> {
    writeln!(md, "# Timings\n\n| dataset | stage | seconds | ran tonight |\n|---|---|---:|---|")?;
    let (td, ts, tp, tsec, tran) = (
        columns::strs(n.timings, "dataset")?,
        columns::strs(n.timings, "stage")?,
        columns::strs(n.timings, "phase")?,
        columns::f64s(n.timings, "seconds")?,
        columns::bools(n.timings, "ran")?,
    );
    for i in (0..n.timings.num_rows()).filter(|&i| tp.value(i) == "total") {
        writeln!(
            md,
            "| {} | {} | {:.2} | {} |",
            td.value(i),
            ts.value(i),
            tsec.value(i),
            if tran.value(i) { "yes" } else { "no (up to date)" }
        )?;
    }
    Ok(())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Inline Markdown: `code`, **bold**, escaped text.
fn inline(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('`')
            && let Some(end) = r.find('`')
        {
            write!(out, "<code>{}</code>", escape(&r[..end])).ok();
            rest = &r[end + 1..];
            continue;
        }
        if let Some(r) = rest.strip_prefix("**")
            && let Some(end) = r.find("**")
        {
            write!(out, "<strong>{}</strong>", inline(&r[..end])).ok();
            rest = &r[end + 2..];
            continue;
        }
        let first = rest.chars().next().map_or(1, char::len_utf8);
        let next = rest[first..].find(['`', '*']).map_or(rest.len(), |i| i + first);
        out.push_str(&escape(&rest[..next]));
        rest = &rest[next..];
    }
    out
}

/// Base64 (standard alphabet, padded) for the inlined figures.
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        out.push(A[(n >> 18) as usize & 63] as char);
        out.push(A[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 { A[(n >> 6) as usize & 63] as char } else { '=' });
        out.push(if c.len() > 2 { A[n as usize & 63] as char } else { '=' });
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1180px;margin:2em auto;padding:0 1em;color:#1d1d1f;line-height:1.45}\
h1{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.6em}h2{margin-top:1.4em}h3{margin-top:1.2em;color:#333}\
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.9em}th,td{border:1px solid #d0d0d0;padding:.25em .6em}\
th{background:#f3f3f6;cursor:pointer;user-select:none}th.sorted-asc::after{content:' ▲'}th.sorted-desc::after{content:' ▼'}\
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.regression td{background:#fde8e8}tr.improvement td{background:#e7f6ea}\
code{background:#f3f3f6;padding:0 .25em;border-radius:3px}figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}\
figcaption{font-size:.85em;color:#555}nav{font-size:.9em}nav a{margin-right:.8em}";

/// Sorts a table by a clicked header (numbers as numbers); logs nothing, except a figure that does
/// not load (what the browser test looks for).
const SCRIPT: &str = "document.querySelectorAll('table').forEach(function(t){var hs=t.querySelectorAll('th');\
hs.forEach(function(h,i){h.addEventListener('click',function(){var asc=!h.classList.contains('sorted-asc');\
hs.forEach(function(x){x.classList.remove('sorted-asc','sorted-desc');});h.classList.add(asc?'sorted-asc':'sorted-desc');\
var b=t.tBodies[0];var rows=Array.prototype.slice.call(b.rows);rows.sort(function(x,y){var a=x.cells[i].textContent,c=y.cells[i].textContent;\
var na=parseFloat(a),nc=parseFloat(c);var r=(!isNaN(na)&&!isNaN(nc))?na-nc:a.localeCompare(c);return asc?r:-r;});\
rows.forEach(function(r){b.appendChild(r);});});});});\
window.addEventListener('load',function(){document.querySelectorAll('img').forEach(function(i){\
if(!i.naturalWidth){console.error('figure failed to load: '+i.alt);}});});";

/// The cells of a Markdown table line (`\|` is a `|` inside a cell).
fn cells(l: &str) -> Vec<String> {
    let inner = l.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek() == Some(&'|') {
            cur.push('|');
            chars.next();
        } else if c == '|' {
            out.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    out.push(cur.trim().to_string());
    out
}

/// The Markdown table starting at `lines[i]` (header, separator, rows) as HTML: rows of the
/// regressions and improvements tables, and failed datasets, are marked. Returns the line after it.
fn table(body: &mut String, lines: &[&str], mut i: usize) -> usize {
    let header = cells(lines[i]);
    let aligns: Vec<bool> = lines.get(i + 1).map(|s| cells(s).iter().map(|c| c.ends_with(':')).collect()).unwrap_or_default();
    body.push_str("<table><thead><tr>");
    for h in &header {
        write!(body, "<th>{}</th>", inline(h)).ok();
    }
    body.push_str("</tr></thead><tbody>");
    i += 2;
    let status_col = header.iter().position(|h| h == "status");
    let in_regressions = body.rfind("<h3>").is_some_and(|p| body[p..].starts_with("<h3>Regressions"));
    let in_improvements = body.rfind("<h3>").is_some_and(|p| body[p..].starts_with("<h3>Improvements"));
    while i < lines.len() && lines[i].starts_with('|') {
        let row = cells(lines[i]);
        let class = if in_regressions {
            " class=\"regression\""
        } else if in_improvements {
            " class=\"improvement\""
        } else if status_col.and_then(|c| row.get(c)).is_some_and(|s| s.contains("failed")) {
            " class=\"regression\""
        } else {
            ""
        };
        write!(body, "<tr{class}>").ok();
        for (j, c) in row.iter().enumerate() {
            let num = if aligns.get(j).copied().unwrap_or(false) { " class=\"num\"" } else { "" };
            write!(body, "<td{num}>{}</td>", inline(c)).ok();
        }
        body.push_str("</tr>");
        i += 1;
    }
    body.push_str("</tbody></table>\n");
    i
}

/// The Markdown report as a self-contained HTML page, with the figures inlined.
pub fn html(md: &str, title: &str, figures: &[Figure]) -> String {
    let by_file: BTreeMap<&str, &Figure> = figures.iter().map(|f| (f.file.as_str(), f)).collect();
    let mut body = String::new();
    let mut nav = Vec::new();
    let lines: Vec<&str> = md.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.starts_with('|') {
            i = table(&mut body, &lines, i);
            continue;
        }
        if let Some(rest) = l.strip_prefix("![")
            && let Some((caption, path)) = rest.split_once("](")
        {
            let file = path.trim_end_matches(')').trim_start_matches("plots/");
            if let Some(f) = by_file.get(file) {
                writeln!(
                    body,
                    "<figure><img alt=\"{}\" src=\"data:image/png;base64,{}\"><figcaption>{}</figcaption></figure>",
                    escape(caption),
                    base64(&f.png),
                    escape(caption)
                )
                .ok();
            }
        } else if let Some(h) = l.strip_prefix("### ") {
            writeln!(body, "<h3>{}</h3>", inline(h)).ok();
        } else if let Some(h) = l.strip_prefix("## ") {
            writeln!(body, "<h2>{}</h2>", inline(h)).ok();
        } else if let Some(h) = l.strip_prefix("# ") {
            let id = format!("s{}", nav.len());
            nav.push((id.clone(), inline(h)));
            writeln!(body, "<h1 id=\"{id}\">{}</h1>", inline(h)).ok();
        } else if !l.trim().is_empty() {
            writeln!(body, "<p>{}</p>", inline(l)).ok();
        }
        i += 1;
    }
    let nav_html: String = nav.iter().skip(1).map(|(id, t)| format!("<a href=\"#{id}\">{t}</a>")).collect();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{}</title><style>{STYLE}</style></head>\n<body><nav>{nav_html}</nav>\n{body}<script>{SCRIPT}</script></body></html>\n",
        escape(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_examples() {
        for (raw, enc) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")]
        {
            assert_eq!(base64(raw.as_bytes()), enc);
        }
    }

    #[test]
    fn markdown_becomes_a_self_contained_page() {
        let fig = Figure { file: "bars-x.png".into(), dataset: "x".into(), caption: "bars <x>".into(), png: vec![1, 2, 3] };
        let md = "# tgrag nightly T\n\nΔ ± — text with `code` and **bold** & <tags>.\n\n## Compared\n\n### Regressions\n\n| a | b |\n|---|---:|\n| m \\| n | 0.5 |\n\n# Dataset `x`\n\n![bars <x>](plots/bars-x.png)\n";
        let h = html(md, "T", &[fig]);
        assert!(h.starts_with("<!DOCTYPE html>") && h.contains("<title>T</title>"));
        assert!(h.contains("<code>code</code>") && h.contains("<strong>bold</strong>") && h.contains("&amp; &lt;tags&gt;"));
        assert!(h.contains("<tr class=\"regression\"><td>m | n</td><td class=\"num\">0.5</td></tr>"), "{h}");
        assert!(h.contains("src=\"data:image/png;base64,AQID\""));
        assert!(h.contains("<a href=\"#s1\">Dataset <code>x</code></a>"));
        assert!(!h.contains("http://") && !h.contains("https://"), "nothing is fetched");
    }
}
