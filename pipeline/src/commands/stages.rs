//! `tgrag stages`: every stage with its dependencies and its status for a dataset (not run, up to
//! date, or stale and why: `code changed`, `config changed`, an input changed, …).

use std::path::Path;

use anyhow::Result;

use crate::commands::{DatasetArgs, stage_configs};
use crate::runner::{self, Decision};

pub fn run(outputs: &Path, a: DatasetArgs) -> Result<()> {
    let all = tgrag_stages::all();
    let dataset = a.resolve()?;
    let configs = stage_configs(&all, &a.set, a.device.map(Into::into))?;
    let root = outputs.join(&dataset.name);
    println!("stages for dataset `{}` ({}):", dataset.name, root.display());
    for s in &all {
        let info = s.info();
        let dir = root.join(info.name);
        let status = if !dir.exists() && runner::read_manifest(&dir).is_none() {
            "not run".to_string()
        } else if let Some(why) = runner::applicability(&root, *s) {
            why
        } else {
            let inputs = runner::stage_inputs(&root, *s, &all, &dataset, outputs)?;
            let cfg = configs.get(info.name).cloned().unwrap_or_else(|| s.default_config());
            let code = runner::code_version(*s);
            let fp = runner::fingerprint(info.name, &code, &cfg, &inputs);
            match runner::decide(&dir, &fp, &code, &cfg, &inputs, false) {
                Decision::Skip(_) => "up to date".into(),
                Decision::Run(why) => format!("stale: {why}"),
                Decision::NotApplicable(why) => why,
            }
        };
        let deps = tgrag_stages::deps_of(*s, &all);
        let deps = if deps.is_empty() { "-".to_string() } else { deps.join(",") };
        println!("  {:<8} v{:<2} deps {:<12} {:<28}  {}", info.name, info.version, deps, status, info.about);
    }
    Ok(())
}
