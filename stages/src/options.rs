//! Every stage option read from its config struct: dotted name, type, default and the field's doc
//! comment (`tgrag options`, docs/options.md, the `--set` check). The JSON schema that
//! `schemars` derives from the struct is the one source; nested structs become dotted names
//! (`mor.traversal.candidates`), flattened ones (`#[serde(flatten)]`) their fields.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

/// One option of a stage.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionDoc {
    /// The dotted name under the stage (`top_k`, `traversal.candidates`).
    pub name: String,
    /// The type as a user writes it (`integer`, `number or null`, `list of string`,
    /// `"lucene" | "okapi"`).
    pub kind: String,
    /// The default value, as `--set` and `config.json` write it.
    pub default: Value,
    /// The field's doc comment (empty where the field has none).
    pub doc: String,
}

impl OptionDoc {
    /// The default as a user writes it: JSON, with an `f32` option's value in its shortest form
    /// (`0.1`, where JSON holds the `f32`'s exact `0.10000000149011612`).
    pub fn default_text(&self) -> String {
        match &self.default {
            Value::Number(n) if !n.is_i64() && !n.is_u64() => match n.as_f64() {
                Some(x) if f64::from(x as f32) == x => format!("{}", x as f32),
                _ => n.to_string(),
            },
            v => v.to_string(),
        }
    }
}

/// The options of config struct `C`, sorted by name.
pub fn describe<C: schemars::JsonSchema + serde::Serialize + Default>() -> Vec<OptionDoc> {
    let settings = SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true);
    let schema = settings.into_generator().into_root_schema_for::<C>();
    let defaults = serde_json::to_value(C::default()).unwrap_or(Value::Null);
    let mut out = Vec::new();
    if let Some(root) = schema.as_object() {
        walk(root, "", Some(&defaults), &mut out);
    }
    out
}

/// The options below `schema` (an object schema), named under `prefix`.
fn walk(schema: &Map<String, Value>, prefix: &str, defaults: Option<&Value>, out: &mut Vec<OptionDoc>) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else { return };
    for (key, prop) in props {
        let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        let Some(prop) = prop.as_object() else { continue };
        let default = defaults.and_then(|d| d.get(key)).or_else(|| prop.get("default")).cloned();
        if prop.contains_key("properties") {
            walk(prop, &name, default.as_ref(), out);
            continue;
        }
        // Rustdoc links read as plain code in a terminal and in docs/options.md.
        let doc = prop.get("description").and_then(Value::as_str).unwrap_or("").trim().replace("[`", "`").replace("`]", "`");
        out.push(OptionDoc { name, kind: kind(prop), default: default.unwrap_or(Value::Null), doc });
    }
}

/// The type of a property schema in words.
fn kind(s: &Map<String, Value>) -> String {
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        return values.iter().map(Value::to_string).collect::<Vec<_>>().join(" | ");
    }
    if let Some(c) = s.get("const") {
        return c.to_string();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(alts) = s.get(key).and_then(Value::as_array) {
            let (nulls, rest): (Vec<&Value>, Vec<&Value>) = alts.iter().partition(|a| a.get("type") == Some(&Value::from("null")));
            let words: Vec<String> = rest.iter().filter_map(|a| a.as_object()).map(kind).collect();
            let joined = words.join(" | ");
            return if nulls.is_empty() { joined } else { format!("{joined} or null") };
        }
    }
    let one = |t: &str| match t {
        "array" => {
            let item = s.get("items").and_then(Value::as_object).map(kind).unwrap_or_else(|| "value".into());
            format!("list of {item}")
        }
        "object" => "map".to_string(),
        other => other.to_string(),
    };
    match s.get("type") {
        Some(Value::String(t)) => one(t),
        Some(Value::Array(ts)) => {
            let words: Vec<String> = ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").map(one).collect();
            let nullable = ts.iter().any(|t| t == "null");
            format!("{}{}", words.join(" | "), if nullable { " or null" } else { "" })
        }
        _ => "value".to_string(),
    }
}

/// Whether `name` (dotted) is an option of `options`, or a group of them (`traversal`).
pub fn known(options: &[OptionDoc], name: &str) -> bool {
    options.iter().any(|o| o.name == name || o.name.strip_prefix(name).is_some_and(|rest| rest.starts_with('.')))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config with every shape the walk handles.
    #[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    struct Inner {
        /// How many.
        count: usize,
    }

    #[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        /// The first.
        Fast,
        Slow,
    }

    #[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    struct Flat {
        /// A flattened field.
        lr: f64,
    }

    #[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    struct Config {
        /// The rate, or none.
        rate: Option<f64>,
        /// Which way.
        mode: Mode,
        seeds: Vec<u64>,
        inner: Inner,
        #[serde(flatten)]
        flat: Flat,
    }

    impl Default for Config {
        fn default() -> Self {
            Config { rate: None, mode: Mode::Slow, seeds: vec![0, 1], inner: Inner { count: 3 }, flat: Flat { lr: 0.5 } }
        }
    }

    #[test]
    fn a_config_struct_reads_as_dotted_options_with_types_defaults_and_docs() {
        let got: Vec<(String, String, String, String)> =
            describe::<Config>().into_iter().map(|o| (o.name, o.kind, o.default.to_string(), o.doc)).collect();
        let want = [
            ("inner.count", "integer", "3", "How many."),
            ("lr", "number", "0.5", "A flattened field."),
            ("mode", "\"slow\" | \"fast\"", "\"slow\"", "Which way."),
            ("rate", "number or null", "null", "The rate, or none."),
            ("seeds", "list of integer", "[0,1]", ""),
        ];
        let want: Vec<(String, String, String, String)> =
            want.iter().map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string())).collect();
        assert_eq!(got, want);
        let opts = describe::<Config>();
        let shown = |v: Value| OptionDoc { default: v, ..opts[0].clone() }.default_text();
        assert_eq!(shown(serde_json::json!(0.1f32)), "0.1");
        assert_eq!(shown(serde_json::json!(0.1f64)), "0.1");
        assert_eq!(shown(serde_json::json!(1e-300)), "1e-300");
        assert_eq!(shown(serde_json::json!(16)), "16");
        assert!(known(&opts, "inner.count") && known(&opts, "inner") && known(&opts, "lr"));
        assert!(!known(&opts, "inne") && !known(&opts, "inner.other") && !known(&opts, "count"));
    }
}
