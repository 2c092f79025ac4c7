//! The shipped dashboards and alert rules name only metrics the services
//! register (a renamed metric would leave a panel or an alert silently
//! empty).

use std::collections::BTreeSet;
use std::path::Path;

/// Every `eddy_*` identifier in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("eddy_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn dashboards_use_only_registered_metric_names() {
    let registered: BTreeSet<&str> = eddy_ingest::metrics::NAMES
        .iter()
        .chain(eddy_query::metrics::NAMES.iter())
        .copied()
        .collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dashboards");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("dashboards/") {
        let path = entry.expect("entry").path();
        let ext = path.extension().and_then(|e| e.to_str());
        if !matches!(ext, Some("json" | "yml" | "yaml")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable");
        for name in metric_names(&text) {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .filter(|base| registered.contains(base))
                .unwrap_or(&name);
            assert!(
                registered.contains(base),
                "{} names {name}, which no service registers",
                path.display()
            );
            checked += 1;
        }
    }
    assert!(
        checked > 10,
        "only {checked} metric names found in {}",
        dir.display()
    );
}
