//! Tests of the plan grammar (tokens, both syntaxes) and of the BIO labels, spans, word shapes and
//! restriction token F1, worked by hand.

use std::collections::HashMap;

use tgrag_datasets::mor_plans::{Dir, Metapath};

use super::bio::{gold_labels, shape, spans, token_f1};
use super::grammar::{PlanSyntax, plan_tokens, render_metapath, tokens_to_paths};
use crate::kb::kb::words;
use crate::{Result, StageError};

/// Tokens of a rendered metapath, read back independently of [`render_metapath`] (JSON parser,
/// MoR's arrow parser).
fn p_tokens(s: &str, syntax: PlanSyntax) -> Result<Vec<String>> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    let paths: Vec<Metapath> = if syntax == PlanSyntax::Lists {
        let lists: Vec<Vec<String>> =
            serde_json::from_str(s).map_err(|e| StageError::Internal(format!("re-reading the metapath {s}: {e}")))?;
        lists
            .into_iter()
            .map(|l| Metapath {
                types: l.iter().step_by(2).cloned().collect(),
                hops: l.iter().skip(1).step_by(2).map(|r| (Some(r.clone()), Dir::Forward)).collect(),
            })
            .collect()
    } else {
        s.split(", ")
            .map(|p| {
                tgrag_datasets::mor_plans::parse_arrow_path(p)
                    .map_err(|e| StageError::Internal(format!("re-reading the metapath {s}: {e}")))
            })
            .collect::<Result<_>>()?
    };
    Ok(plan_tokens(&paths))
}

fn r(v: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    v.iter().map(|(t, x)| (t.to_string(), x.iter().map(|s| s.to_string()).collect())).collect()
}

#[test]
fn tokens_round_trip_both_syntaxes_and_bad_sequences_are_no_plan() {
    let arrow =
        tgrag_datasets::mor_plans::parse_arrow_path("institution -> author -> paper <- field_of_study").unwrap_or_else(|e| panic!("{e}"));
    let t = plan_tokens(std::slice::from_ref(&arrow));
    assert_eq!(t, ["institution", "->", "author", "->", "paper", "<-", "field_of_study"]);
    assert_eq!(tokens_to_paths(&t), Some(vec![arrow.clone()]));
    assert_eq!(
        render_metapath(&[arrow], PlanSyntax::Arrow).unwrap_or_else(|e| panic!("render: {e:?}")),
        "institution -> author -> paper <- field_of_study"
    );
    let prime = vec![
        Metapath { types: vec!["anatomy".into(), "gene/protein".into()], hops: vec![(Some("expression present".into()), Dir::Forward)] },
        Metapath { types: vec!["disease".into(), "disease".into()], hops: vec![(Some("parent-child".into()), Dir::Forward)] },
    ];
    let t = plan_tokens(&prime);
    assert_eq!(t, ["anatomy", "-expression present->", "gene/protein", "|", "disease", "-parent-child->", "disease"]);
    let s = render_metapath(&prime, PlanSyntax::Lists).unwrap_or_else(|e| panic!("render: {e:?}"));
    assert_eq!(s, r#"[["anatomy","expression present","gene/protein"],["disease","parent-child","disease"]]"#);
    assert_eq!(p_tokens(&s, PlanSyntax::Lists).unwrap_or_else(|e| panic!("tokens: {e:?}")), t);
    assert!(p_tokens("[[\"anatomy\"", PlanSyntax::Lists).is_err(), "a metapath that does not read back is an error, not an empty plan");
    for bad in [vec!["->"], vec!["a", "->"], vec!["a", "b"], vec!["a", "|"]] {
        let bad: Vec<String> = bad.into_iter().map(String::from).collect();
        assert_eq!(tokens_to_paths(&bad), None, "{bad:?}");
    }
    assert_eq!(tokens_to_paths(&[]), Some(vec![]));
}

#[test]
fn gold_labels_and_spans_round_trip_by_hand() {
    let q = "Papers from Eckerd College on the neutron scattering of 6He?";
    let types: Vec<String> = vec!["institution".into(), "paper".into()];
    let ids: HashMap<String, u32> = types.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let ws = words(q);
    let gold = r(&[("institution", &["Eckerd College"]), ("paper", &["neutron scattering of 6He", "not in the query"])]);
    let l = gold_labels(&ws, &gold, &ids);
    //                  papers from eckerd college on the neutron scattering of 6he
    assert_eq!(l, vec![0, 0, 1, 2, 0, 0, 3, 4, 4, 4]);
    assert_eq!(spans(q, &ws, &l, &types), r(&[("institution", &["Eckerd College"]), ("paper", &["neutron scattering of 6He"])]));
    // Two adjacent B labels are two spans; an I after O starts one.
    assert_eq!(
        spans(q, &ws, &[0, 0, 1, 1, 0, 0, 0, 4, 0, 0], &types),
        r(&[("institution", &["Eckerd", "College"]), ("paper", &["scattering"])])
    );
}

#[test]
fn token_f1_by_hand() {
    let gold = r(&[("paper", &["neutron scattering"]), ("institution", &["Eckerd College"])]);
    // pred: paper {neutron}, institution {eckerd, college, university}: common 3; |P| = 4, |G| = 4.
    let pred = r(&[("paper", &["Neutron"]), ("institution", &["Eckerd College University"])]);
    assert!((token_f1(&pred, &gold) - 6.0 / 8.0).abs() < 1e-12);
    // The type matters.
    assert_eq!(token_f1(&r(&[("author", &["neutron scattering"])]), &r(&[("paper", &["neutron scattering"])])), 0.0);
    assert_eq!(token_f1(&[], &[]), 1.0);
}

#[test]
fn shapes() {
    let q = "from 'Eckerd' NASA 6He data x";
    let s: Vec<u32> = words(q).iter().map(|(_, a, b)| shape(q, *a, *b)).collect();
    assert_eq!(s, vec![1, 7, 3, 4, 1, 1]);
}
