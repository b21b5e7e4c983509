//! `tgrag options [STAGE]`: every stage option with its type, default and doc comment, read from
//! the stages' config structs (`tgrag_stages::options`); `--markdown` prints docs/options.md.

use anyhow::Result;
use tgrag_stages::Stage;

#[derive(Debug, clap::Args)]
pub struct OptionsArgs {
    /// Only this stage's options.
    pub stage: Option<String>,
    /// The whole list as Markdown (what docs/options.md holds).
    #[arg(long)]
    pub markdown: bool,
}

pub fn run(a: OptionsArgs) -> Result<()> {
    let all = tgrag_stages::all();
    let chosen: Vec<&'static dyn Stage> = match &a.stage {
        None => all,
        Some(name) => match all.iter().find(|s| s.info().name == name) {
            Some(s) => vec![*s],
            None => {
                let names: Vec<&str> = all.iter().map(|s| s.info().name).collect();
                bail_config!("no stage `{name}` (stages: {})", names.join(", "));
            }
        },
    };
    if a.markdown {
        print!("{}", markdown(&chosen));
        return Ok(());
    }
    for s in chosen {
        let opts = s.options();
        println!("{}  ({} options)  {}", s.info().name, opts.len(), s.info().about);
        for o in opts {
            println!("  {}.{}  {}  default {}", s.info().name, o.name, o.kind, o.default_text());
            if !o.doc.is_empty() {
                println!("      {}", o.doc.replace('\n', "\n      "));
            }
        }
        println!();
    }
    Ok(())
}

/// Every option of `stages` as the Markdown of docs/options.md.
pub fn markdown(stages: &[&'static dyn Stage]) -> String {
    let mut md = String::from(
        "# Stage options\n\nEvery option of every stage, generated from the stages' config structs by \
         `tgrag options --markdown > docs/options.md` (a test fails when this file is out of date). Set one \
         with `tgrag run --set STAGE.NAME=VALUE`: VALUE is JSON, or else a plain string \
         (`--set bm25.k1=1.2`, `--set 'gretriever.seeds=[0,1,2,3]'`, `--set mor.traversal.candidates=50`). \
         A stage's whole configuration is in its folder's `config.json`, and part of its cache key.\n",
    );
    for s in stages {
        let info = s.info();
        let opts = s.options();
        let mut about = info.about.chars();
        let about: String = about.next().map(|c| c.to_uppercase().chain(about).collect()).unwrap_or_default();
        md.push_str(&format!("\n## `{}`\n\n{about}.\n\n", info.name));
        if opts.is_empty() {
            md.push_str("No options.\n");
            continue;
        }
        md.push_str("| option | type | default | what it does |\n|---|---|---|---|\n");
        let cell = |t: &str| t.replace('|', "\\|").replace('\n', " ");
        for o in opts {
            md.push_str(&format!("| `{}` | {} | `{}` | {} |\n", o.name, cell(&o.kind), cell(&o.default_text()), cell(&o.doc)));
        }
    }
    md
}
