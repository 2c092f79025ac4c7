//! The optional TOML config file, applied as `EDDY_*` environment variables
//! before clap parses (so flags and variables already set win).

use std::path::PathBuf;

use crate::error::{Error, Result};

/// Reads the TOML file named by `--config FILE` / `--config=FILE` in `args`
/// or by `EDDY_CONFIG`, and exports each of its keys as `EDDY_<KEY>` unless
/// that variable is already set. Arrays become `;`-separated lists; the
/// `[kafka]` table becomes `EDDY_KAFKA_PROPERTIES`.
///
/// Call it before any other thread starts (it sets environment variables).
pub fn apply_config_file(args: &[String]) -> Result<()> {
    let from_args = args.iter().enumerate().find_map(|(i, a)| {
        if a == "--config" {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix("--config=").map(str::to_owned)
        }
    });
    let Some(path) = from_args.or_else(|| std::env::var("EDDY_CONFIG").ok()) else {
        return Ok(());
    };
    let path = PathBuf::from(path);
    let text = std::fs::read_to_string(&path).map_err(|source| Error::ReadFile {
        path: path.clone(),
        source,
    })?;
    let vars = env_from_toml(&text).map_err(|source| Error::ParseFile { path, source })?;
    for (key, value) in vars {
        if std::env::var_os(&key).is_none() {
            std::env::set_var(key, value);
        }
    }
    Ok(())
}

/// The environment variables a TOML config file stands for.
pub fn env_from_toml(text: &str) -> Result<Vec<(String, String)>, toml::de::Error> {
    let table: toml::Table = text.parse()?;
    let mut out = Vec::new();
    for (key, value) in table {
        let var = if key == "collections" {
            "EDDY_COLLECTIONS".to_owned()
        } else {
            format!("EDDY_{}", key.replace('-', "_").to_ascii_uppercase())
        };
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Table(t) if key == "kafka" => {
                let pairs: Vec<String> = t
                    .iter()
                    .map(|(k, v)| format!("{k}={}", scalar(v)))
                    .collect();
                out.push(("EDDY_KAFKA_PROPERTIES".to_owned(), pairs.join(";")));
                continue;
            }
            toml::Value::Array(items) => items.iter().map(scalar).collect::<Vec<_>>().join(";"),
            other => scalar(&other),
        };
        out.push((var, text));
    }
    Ok(out)
}

fn scalar(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_maps_to_env() {
        let env = env_from_toml(
            r#"
store = "/data"
seal-rows = 1000
collections = ["name=a,dim=3", "name=b,dim=4"]
[kafka]
"security.protocol" = "SSL"
"#,
        )
        .expect("valid toml");
        assert!(env.contains(&("EDDY_STORE".into(), "/data".into())));
        assert!(env.contains(&("EDDY_SEAL_ROWS".into(), "1000".into())));
        assert!(env.contains(&(
            "EDDY_COLLECTIONS".into(),
            "name=a,dim=3;name=b,dim=4".into()
        )));
        assert!(env.contains(&(
            "EDDY_KAFKA_PROPERTIES".into(),
            "security.protocol=SSL".into()
        )));
    }

    #[test]
    fn a_missing_or_invalid_file_names_itself() {
        let missing = apply_config_file(&["x".into(), "--config=/nonexistent/eddy.toml".into()])
            .expect_err("missing file");
        assert!(matches!(missing, Error::ReadFile { .. }), "{missing:?}");
        assert!(missing.to_string().contains("/nonexistent/eddy.toml"));
        let dir = std::env::temp_dir().join(format!("eddy-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "store = ").expect("write");
        let args = [
            "x".to_owned(),
            "--config".to_owned(),
            bad.display().to_string(),
        ];
        let invalid = apply_config_file(&args).expect_err("invalid toml");
        assert!(matches!(invalid, Error::ParseFile { .. }), "{invalid:?}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
