//! Every real file of `../shared/datasets` loads, with the counts its MANIFEST states (skipped with a
//! message when the folder is absent), and malformed variants of each format give located errors.

use crate::test_support::{TestResult, malformed_at, shared, write};

#[test]
fn citeseer_tape_files_have_manifest_counts() -> TestResult {
    let Some(dir) = shared("citeseer-text") else { return Ok(()) };
    let g = crate::tape::load(&dir)?;
    assert_eq!(g.papers.len(), 3186);
    let count = |l: &str| g.papers.iter().filter(|p| p.label == l).count();
    assert_eq!([count("DB"), count("IR"), count("ML"), count("Agents"), count("HCI"), count("AI")], [685, 641, 569, 562, 490, 239]);
    assert!(g.papers[0].text.starts_with("Argument in Multi-Agent Systems"));
    assert_eq!(g.papers[0].key, "norman00argument");
    let lens: Vec<usize> = g.papers.iter().map(|p| p.text.chars().count()).collect();
    assert_eq!((lens.iter().min(), lens.iter().max()), (Some(&32), Some(&2372)));
    assert_eq!((g.stats.lines, g.stats.both_known, g.unknown_ids), (4732, 4397, 141));
    // Self-loops over all lines, counted from the raw file.
    let raw = crate::raw::read_utf8(&dir.join("citeseer.cites"))?;
    let loops = raw.lines().filter(|l| l.split_once('\t').is_some_and(|(a, b)| a == b)).count();
    assert_eq!(loops, 124);
    assert_eq!(g.stats.kept, g.stats.both_known - g.stats.self_loops - g.stats.duplicates);
    assert!(g.edges.iter().all(|&(a, b)| a != b));
    // Direction: `100157 <TAB> 364207` means 364207 cites 100157.
    let id = |k: &str| g.papers.iter().position(|p| p.key == k).map(|i| i as u32);
    if let (Some(cited), Some(citing)) = (id("100157"), id("364207")) {
        assert!(g.edges.contains(&(citing, cited)));
    }
    let t = g.to_tables()?;
    t.validate()?;
    assert_eq!(t.get("tag_edges").map(|e| e.batch.num_rows()), Some(g.stats.kept));
    Ok(())
}

#[test]
fn tape_malformed_files_are_located() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let t = write(tmp.path(), "x_texts.txt", b"p1\nTitle one\nML\np2\nTitle two\n")?;
    write(tmp.path(), "x.cites", b"p1\tp2\n")?;
    let (path, at, reason) = malformed_at(crate::tape::load(tmp.path()).err().ok_or("accepted a truncated record")?)?;
    assert_eq!((path, at.as_str()), (t.clone(), "line 5"));
    assert!(reason.contains("truncated"), "{reason}");
    write(tmp.path(), "x_texts.txt", b"p1\nTitle one\nML\np1\nTitle two\nAI")?;
    let (_, at, reason) = malformed_at(crate::tape::load(tmp.path()).err().ok_or("accepted a repeated id")?)?;
    assert_eq!(at, "line 4");
    assert!(reason.contains("repeats record 0"));
    write(tmp.path(), "x_texts.txt", b"p1\nTitle \xc3\nML\n")?;
    let (_, at, _) = malformed_at(crate::tape::load(tmp.path()).err().ok_or("accepted bad UTF-8")?)?;
    assert!(at.starts_with("line 2"), "{at}");
    write(tmp.path(), "x_texts.txt", b"p1\nTitle one\nML\np2\nTitle two\nAI\n")?;
    let c = write(tmp.path(), "x.cites", b"p1\tp2\np1 p2\n")?;
    let (path, at, _) = malformed_at(crate::tape::load(tmp.path()).err().ok_or("accepted a space-separated line")?)?;
    assert_eq!((path, at.as_str()), (c, "line 2"));
    write(tmp.path(), "x.cites", b"p1\tp2\np1\tp2\np2\tp2\nzz\tp1\n")?;
    let g = crate::tape::load(tmp.path())?;
    assert_eq!((g.edges.clone(), g.stats.duplicates, g.stats.self_loops, g.unknown_ids), (vec![(1, 0)], 1, 1, 1));
    Ok(())
}

#[test]
fn enron_sample_has_manifest_counts() -> TestResult {
    let Some(dir) = shared("enron-sample") else { return Ok(()) };
    let emails = crate::enron::read_csv(&dir.join("emails_1000.csv"))?;
    assert_eq!(emails.len(), 1000);
    let senders: std::collections::HashSet<&str> = emails.iter().map(|e| e.from.as_str()).collect();
    assert_eq!(senders.len(), 531);
    let occurrences: usize = emails.iter().map(|e| e.to.len() + e.cc.len()).sum();
    assert_eq!(occurrences, 7568);
    let g = crate::enron::PeopleGraph::build(emails, &dir.join("emails_1000.csv"));
    assert_eq!(g.people.len(), 3924);
    let first = &g.emails[0];
    assert_eq!(
        (first.file.as_str(), first.from.as_str(), first.subject.as_str()),
        ("shackleton-s/inbox/721.", "beth.apollo@enron.com", "FW:")
    );
    assert_eq!(first.to, ["sara.shackleton@enron.com"]);
    // email.utils.parsedate_to_datetime('Tue, 19 Feb 2002 15:00:45 -0800 (PST)').timestamp()
    assert_eq!(first.date, Some(1_014_159_645));
    assert!(first.body.trim_start().starts_with("here are the documents that we discussed on Enervest"));
    assert!(g.emails.iter().all(|e| e.date.is_some()), "every Date header parses");
    let t = g.to_tables()?;
    t.validate()?;
    let distinct: std::collections::HashSet<(u32, u32)> =
        g.ends.iter().flat_map(|(s, r)| r.iter().filter(move |&&x| x != *s).map(move |&x| (*s, x))).collect();
    assert_eq!(t.get("tag_edges").map(|e| e.batch.num_rows()), Some(distinct.len()));
    assert_eq!(t.get("emails").map(|e| e.batch.num_rows()), Some(1000));
    Ok(())
}

#[test]
fn enron_headers_dates_and_malformed_rows() -> TestResult {
    use crate::enron::*;
    let (h, body) = split_message("From: a@x.com\nTo: b@x.com, c@x.com,\n\td@x.com\nSubject: hi\nSubject: second\n\nbody\n\nmore");
    assert_eq!(addresses(h.get("to")), ["b@x.com", "c@x.com", "d@x.com"]);
    assert_eq!(h.get("subject").map(String::as_str), Some("hi"));
    assert_eq!(body, "body\n\nmore");
    assert_eq!(parse_date("Tue, 15 Aug 2000 03:16:00 -0700 (PDT)"), Some(966_334_560));
    assert_eq!(parse_date("1 Jan 1970 00:00:00 +0000"), Some(0));
    assert_eq!(parse_date("yesterday"), None);
    let tmp = tempfile::tempdir()?;
    let p =
        write(tmp.path(), "emails.csv", b"file,message\na/1.,\"From: a@x.com\nTo: b@x.com\n\nhi\"\na/2.,\"To: b@x.com\n\nno sender\"\n")?;
    let (path, at, _) = malformed_at(read_csv(&p).err().ok_or("accepted a message without From")?)?;
    assert_eq!((path, at.as_str()), (p, "row 1, column message"));
    let p = write(tmp.path(), "emails2.csv", b"file,message\na/1.,\"From: a@x.com\n\nhi")?;
    let (_, at, _) = malformed_at(read_csv(&p).err().ok_or("accepted an unclosed quote")?)?;
    assert!(at.starts_with("line "), "{at}");
    let p = write(tmp.path(), "emails3.csv", b"file,msg\na,b\n")?;
    let (_, at, reason) = malformed_at(read_csv(&p).err().ok_or("accepted a wrong header")?)?;
    assert_eq!((at.as_str(), reason.as_str()), ("header", "missing column `message` (the header is `file,msg`)"));
    Ok(())
}

#[test]
fn primekg_paths_have_manifest_counts() -> TestResult {
    let Some(dir) = shared("primekg-drugmechdb-paths") else { return Ok(()) };
    let p = crate::primekg_paths::Pathways::load(&dir)?;
    assert_eq!((p.nodes.len(), p.edge_rows, p.metadata_rows, p.paths.len(), p.node_rows), (509, 1113, 343, 343, 1456));
    assert_eq!(p.nodes.get(&35641).map(|n| n.names[0].as_str()), Some("Epilepsy"));
    assert_eq!(p.nodes.get(&15173).map(|n| n.node_type.as_str()), Some("drug"));
    // Path lengths against the metadata's own num_nodes / num_edges columns.
    let meta = crate::raw::Csv::read(&dir.join("benchmark_pathways_metadata.csv"))?;
    let (ci, cn, ce) = (meta.col("pathway_id")?, meta.col("num_nodes")?, meta.col("num_edges")?);
    for r in 0..meta.rows.len() {
        let path = p.paths.iter().find(|x| x.pathway_id == meta.rows[r][ci]).ok_or("pathway missing")?;
        assert_eq!(path.nodes.len(), meta.int::<usize>(r, cn)?, "{}", path.pathway_id);
        assert_eq!(path.relations.len(), meta.int::<usize>(r, ce)?, "{}", path.pathway_id);
    }
    let json: serde_json::Value = serde_json::from_str(&crate::raw::read_utf8(&dir.join("subgraph_with_pathways.json"))?)?;
    assert_eq!((json["nodes"].as_array().map(Vec::len), json["links"].as_array().map(Vec::len)), (Some(508), Some(1113)));
    p.to_tables()?.validate()?;
    Ok(())
}

#[test]
fn primekg_paths_dangling_edge_is_located() -> TestResult {
    let tmp = tempfile::tempdir()?;
    write(
        tmp.path(),
        "benchmark_pathways_nodes.csv",
        b"pathway_id,step_order,node_name,node_type,node_index\np,1,aspirin,drug,5\np,2,pain,disease,9\n",
    )?;
    let e = write(
        tmp.path(),
        "benchmark_pathways_edges.csv",
        b"pathway_id,step_from,step_to,source_index,target_index,relation\np,1,2,5,9,indication\np,2,3,9,77,x\n",
    )?;
    write(tmp.path(), "benchmark_pathways_metadata.csv", b"pathway_id\np\n")?;
    let (path, at, _) = malformed_at(crate::primekg_paths::Pathways::load(tmp.path()).err().ok_or("accepted a dangling edge")?)?;
    assert_eq!((path, at.as_str()), (e, "row 1, column target_index"));
    Ok(())
}

const KB_TYPES: [(&str, &[&str]); 3] = [
    ("amazon", &["product", "brand", "category", "color"]),
    ("mag", &["paper", "author", "institution", "field_of_study"]),
    (
        "prime",
        &[
            "anatomy",
            "biological_process",
            "cellular_component",
            "disease",
            "drug",
            "effect/phenotype",
            "exposure",
            "gene/protein",
            "molecular_function",
            "pathway",
        ],
    ),
];

#[test]
fn every_mor_plan_line_parses_or_is_rejected_with_a_reason() -> TestResult {
    let Some(dir) = shared("mor-plans") else { return Ok(()) };
    use crate::mor_plans::*;
    let counts = [("amazon", 1000, 5910, 1548, 296), ("mag", 1000, 7993, 2665, 227), ("prime", 1081, 6162, 2241, 108)];
    for ((kb, ft, train, val, empty), (_, types)) in counts.into_iter().zip(KB_TYPES) {
        let f = read_finetune(&dir.join(kb).join("llama_ft.jsonl"), Some(types))?;
        assert_eq!(f.len(), ft, "{kb}");
        let bad: Vec<_> = f.iter().filter_map(|l| l.plan.as_ref().err().map(|e| (l.line, e.clone()))).collect();
        // The LLM-written fine-tuning plans are nearly all valid; the rare reject names its reason.
        assert!(bad.len() * 100 <= f.len(), "{kb} fine-tuning plans rejected: {bad:?}");
        for (line, why) in &bad {
            eprintln!("{kb}/llama_ft.jsonl line {line}: rejected: {why}");
        }
        let tr = read_plans(&dir.join(kb).join("plans_train.jsonl"), Some(types))?;
        let va = read_plans(&dir.join(kb).join("plans_val.jsonl"), Some(types))?;
        assert_eq!((tr.len(), va.len()), (train, val), "{kb}");
        let rejected: Vec<&PlanLine> = tr.iter().chain(&va).filter(|l| l.plan.is_err()).collect();
        let empty_rejects = rejected.iter().filter(|l| l.plan.as_ref().err().is_some_and(|e| e.starts_with("empty Metapath"))).count();
        assert_eq!(empty_rejects, empty, "{kb}");
        // Other rejects: types outside the KB, odd-length Prime paths (a few percent at most; the
        // sampled Prime planner is the noisiest).
        assert!(rejected.len() - empty_rejects <= (tr.len() + va.len()) / 20, "{kb}: {} other rejects", rejected.len() - empty_rejects);
        for l in &rejected {
            let reason = l.plan.as_ref().err().cloned().unwrap_or_default();
            eprintln!("{kb} line {}: rejected: {reason}", l.line);
        }
        for l in tr.iter().chain(&va).chain(&f) {
            if let Ok(p) = &l.plan {
                for m in &p.metapaths {
                    assert_eq!(m.hops.len() + 1, m.types.len());
                }
            }
        }
    }
    Ok(())
}

#[test]
fn plan_grammar_by_hand() -> TestResult {
    use crate::mor_plans::*;
    let v = python_literal(
        r#"{'Metapath': 'brand -> product <- category', 'Restriction': {'brand': ['Nike\'s'], "product": ["a \"b\"", 'caf\xe9']}}"#,
    )?;
    let p = parse_plan(&v, Some(&["brand", "product", "category"]))?;
    assert_eq!(p.metapaths[0].types, ["brand", "product", "category"]);
    assert_eq!(p.metapaths[0].hops, [(None, Dir::Forward), (None, Dir::Backward)]);
    assert_eq!(p.metapaths[0].to_mor_string(), "brand -> product <- category");
    assert_eq!(
        p.restrictions,
        [("brand".to_string(), vec!["Nike's".to_string()]), ("product".to_string(), vec!["a \"b\"".to_string(), "café".to_string()])]
    );
    let v =
        python_literal("{'Metapath': [['drug', 'indication', 'disease'], ('gene/protein', 'ppi', 'gene/protein')], 'Restriction': {}}")?;
    let p = parse_plan(&v, None)?;
    assert_eq!(p.metapaths[1].hops, [(Some("ppi".to_string()), Dir::Forward)]);
    for (bad, why) in [
        ("{'Metapath': ''}", "empty Metapath"),
        ("{'Metapath': 'paper -> -> author'}", "empty node type"),
        ("{'Metapath': [['drug', 'indication']]}", "odd number"),
        ("{'Metapath': 'paper -> planet'}", "not a type of this KB"),
        ("{'Restriction': {}}", "no `Metapath`"),
    ] {
        let r = python_literal(bad).and_then(|v| parse_plan(&v, Some(&["paper", "author", "drug", "disease"])));
        assert!(r.as_ref().is_err_and(|e| e.contains(why)), "{bad}: {r:?}");
    }
    for bad in ["{'a': 'unclosed}", "{'a' 1}", "{'a': [1, 2}", "{'a': os.system}"] {
        assert!(python_literal(bad).is_err(), "{bad}");
    }
    Ok(())
}

#[test]
fn mor_plan_file_errors_are_located() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let p = write(
        tmp.path(),
        "plans.jsonl",
        b"{\"q_id\": 1, \"query\": \"q\", \"answer_ids\": [2], \"plan\": {\"Metapath\": \"paper\"}}\n{\"q_id\": \"x\"}\n",
    )?;
    let (path, at, _) = malformed_at(crate::mor_plans::read_plans(&p, None).err().ok_or("accepted a bad q_id")?)?;
    assert_eq!((path, at.as_str()), (p, "line 2, field q_id"));
    let p = write(tmp.path(), "ft.jsonl", b"{\"conversations\": [{\"role\": \"user\", \"content\": \"q\"}]}\n")?;
    let (_, at, _) = malformed_at(crate::mor_plans::read_finetune(&p, None).err().ok_or("accepted a one-sided conversation")?)?;
    assert_eq!(at, "line 1");
    let p = write(tmp.path(), "cut.jsonl", b"{\"q_id\": 1, \"query\": \"q\", \"ans")?;
    let (_, at, _) = malformed_at(crate::mor_plans::read_plans(&p, None).err().ok_or("accepted a truncated line")?)?;
    assert_eq!(at, "line 1");
    Ok(())
}

#[test]
fn stark_qa_git_history_copies_load() -> TestResult {
    let Some(dir) = shared("stark-qa") else { return Ok(()) };
    for (kb, rows, human) in [("amazon", 9100, 81), ("mag", 13323, 84), ("primekg", 11204, 109)] {
        let qa = crate::stark::Qa::load_dir(&dir.join(kb), false)?;
        assert_eq!(qa.rows.len(), rows, "{kb}");
        // train/val/test partition the ids.
        let mut all: Vec<usize> = qa.splits.iter().flat_map(|(_, v)| v.iter().copied()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..rows).collect::<Vec<_>>(), "{kb}");
        assert_eq!(qa.splits.len(), 3, "{kb}: no test-0.1.index in this copy");
        let h = crate::stark::Qa::load_dir(&dir.join(kb), true)?;
        assert_eq!(h.rows.len(), human, "{kb}");
        assert!(h.rows.iter().all(|r| r.source_ids.is_some()));
    }
    let schema: serde_json::Value = serde_json::from_str(&crate::raw::read_utf8(&dir.join("mag/schema/mag.json"))?)?;
    assert!(schema.is_object() || schema.is_array());
    let cats: serde_json::Value = serde_json::from_str(&crate::raw::read_utf8(&dir.join("amazon/category_list.json"))?)?;
    assert!(cats.as_array().is_some_and(|a| !a.is_empty()) || cats.as_object().is_some_and(|o| !o.is_empty()));
    Ok(())
}

#[test]
fn registry_reads_raw_folders() -> TestResult {
    use crate::registry::{DatasetOptions, Source, resolve};
    for (name, folder, table, rows) in [
        ("citeseer", "citeseer-text", "tag_nodes", 3186),
        ("enron", "enron-sample", "emails", 1000),
        ("explagraphs", "explagraphs", "qa", 2766),
        ("primekg-paths", "primekg-drugmechdb-paths", "nodes", 509),
    ] {
        let Some(dir) = shared(folder) else { return Ok(()) };
        let spec = resolve(name, Some(dir.clone()), DatasetOptions::default())?;
        assert!(matches!(spec.source, Source::Raw { .. }), "{name}: {:?}", spec.source);
        let t = crate::load(&spec)?;
        assert_eq!(t.get(table).map(|x| x.batch.num_rows()), Some(rows), "{name}");
        assert!(spec.content_key()?.contains(":"), "{name}");
    }
    let Some(dir) = shared("webqsp-questions") else { return Ok(()) };
    let spec = resolve("webqsp", Some(dir), DatasetOptions::default())?;
    let err = crate::load(&spec).err().ok_or("webqsp without subgraphs loaded")?;
    assert!(err.to_string().contains("no per-question subgraphs"), "{err}");
    Ok(())
}
