//! Progress bars for long phases (indicatif on stderr). They draw only when
//! stderr is a terminal, so logs and CI output stay clean.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar counting `len` items of `unit` (a spinner with a counter when `len`
/// is `None`), labelled `label`; hidden unless stderr is a terminal.
pub fn bar(label: &str, len: Option<u64>, unit: &str) -> ProgressBar {
    let target = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let (pb, template) = match len {
        Some(n) => (
            ProgressBar::with_draw_target(Some(n), target),
            format!("{{prefix:>12}} [{{bar:30}}] {{human_pos}}/{{human_len}} {unit} ({{per_sec}}, eta {{eta}}) {{msg}}"),
        ),
        None => (
            ProgressBar::with_draw_target(None, target),
            format!("{{prefix:>12}} {{spinner}} {{human_pos}} {unit} ({{per_sec}}, {{elapsed}}) {{msg}}"),
        ),
    };
    if let Ok(style) = ProgressStyle::with_template(&template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(label.to_owned());
    pb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_count_when_hidden() {
        // Under `cargo test` stderr is usually not a terminal: the bar is
        // hidden but still counts.
        let pb = bar("test", Some(10), "events");
        pb.inc(3);
        assert_eq!(pb.position(), 3);
        assert_eq!(pb.length(), Some(10));
        let spinner = bar("open", None, "requests");
        spinner.inc(1);
        assert_eq!(spinner.position(), 1);
        spinner.finish_and_clear();
    }
}
