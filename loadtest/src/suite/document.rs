//! The report as a document — sections of paragraphs, tables and charts —
//! rendered once as Markdown and once as a self-contained HTML page, so the
//! two always say the same.

use std::fmt::Write as _;

use super::svg::{escape, Chart};

/// A table: a header row and rows of cells.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows, each as long as `headers`.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headers and no rows yet.
    pub fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

/// One block of a section, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A paragraph of plain text (`code` in backticks is kept as code).
    Text(String),
    /// A table.
    Table(Table),
    /// A chart (inline SVG in HTML; its title only in Markdown).
    Chart(Chart),
}

/// A titled section.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// The heading.
    pub title: String,
    /// Its content.
    pub blocks: Vec<Block>,
}

impl Section {
    /// An empty section titled `title`.
    pub fn new(title: &str) -> Self {
        Self {
            title: title.to_owned(),
            blocks: Vec::new(),
        }
    }

    /// Appends a paragraph.
    pub fn text(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Text(text.into()));
    }

    /// Appends a table (nothing when it has no rows).
    pub fn table(&mut self, table: Table) {
        if !table.rows.is_empty() {
            self.blocks.push(Block::Table(table));
        }
    }

    /// Appends a chart.
    pub fn chart(&mut self, chart: Chart) {
        self.blocks.push(Block::Chart(chart));
    }
}

/// Renders `sections` as Markdown under `title`.
pub fn markdown(title: &str, sections: &[Section]) -> String {
    let mut out = format!("# {title}\n");
    for s in sections {
        let _ = write!(out, "\n## {}\n", s.title);
        for b in &s.blocks {
            match b {
                Block::Text(t) => {
                    let _ = write!(out, "\n{t}\n");
                }
                Block::Table(t) => {
                    let cell = |c: &str| c.replace('|', "\\|");
                    let _ = write!(
                        out,
                        "\n| {} |\n|{}\n",
                        t.headers
                            .iter()
                            .map(|h| cell(h))
                            .collect::<Vec<_>>()
                            .join(" | "),
                        "---|".repeat(t.headers.len())
                    );
                    for r in &t.rows {
                        let _ = writeln!(
                            out,
                            "| {} |",
                            r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
                        );
                    }
                }
                Block::Chart(c) => {
                    let _ = write!(out, "\n*Chart (in the HTML report): {}.*\n", c.title);
                }
            }
        }
    }
    out
}

/// Renders `sections` as one HTML page (styles and charts inline).
pub fn html(title: &str, sections: &[Section]) -> String {
    let mut out = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0}</title>\n<style>\
body{{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}}\
table{{border-collapse:collapse;margin:1em 0;font-size:13px}}\
th,td{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
th{{background:#f3f3f3}} td:first-child,th:first-child{{text-align:left}}\
code{{background:#f3f3f3;padding:0 3px}} svg{{display:block;margin:1em 0}}\
</style></head><body>\n<h1>{0}</h1>\n",
        escape(title)
    );
    for s in sections {
        let _ = writeln!(out, "<h2>{}</h2>", escape(&s.title));
        for b in &s.blocks {
            match b {
                Block::Text(t) => {
                    let _ = writeln!(out, "<p>{}</p>", inline_code(&escape(t)));
                }
                Block::Table(t) => {
                    out.push_str("<table><tr>");
                    for h in &t.headers {
                        let _ = write!(out, "<th>{}</th>", escape(h));
                    }
                    out.push_str("</tr>\n");
                    for r in &t.rows {
                        out.push_str("<tr>");
                        for c in r {
                            let _ = write!(out, "<td>{}</td>", inline_code(&escape(c)));
                        }
                        out.push_str("</tr>\n");
                    }
                    out.push_str("</table>\n");
                }
                Block::Chart(c) => {
                    out.push_str(&c.to_svg());
                    out.push('\n');
                }
            }
        }
    }
    out.push_str("</body></html>\n");
    out
}

/// Turns `` `text` `` spans into `<code>` (after escaping).
fn inline_code(s: &str) -> String {
    let mut out = String::new();
    for (i, part) in s.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::svg::Series;

    #[test]
    fn markdown_and_html_carry_the_same_tables_and_text() {
        let mut s = Section::new("Served");
        s.text("run with `eddy-loadtest suite`");
        let mut t = Table::new(&["engine", "q/s"]);
        t.row(vec!["eddy | HTTP".into(), "1200".into()]);
        s.table(t);
        s.table(Table::new(&["left out"]));
        s.chart(Chart {
            title: "q/s vs recall".into(),
            x_label: "recall".into(),
            y_label: "q/s".into(),
            log_y: false,
            series: vec![Series {
                name: "eddy".into(),
                points: vec![(0.9, 1.0), (0.95, 2.0)],
            }],
        });
        let md = markdown("Report", std::slice::from_ref(&s));
        assert!(md.contains("## Served"));
        assert!(md.contains("| engine | q/s |\n|---|---|\n| eddy \\| HTTP | 1200 |"));
        assert!(!md.contains("left out"));
        assert!(md.contains("Chart (in the HTML report): q/s vs recall"));
        let page = html("Report", &[s]);
        assert!(page.contains("<code>eddy-loadtest suite</code>"));
        assert!(page.contains("<td>eddy | HTTP</td><td>1200</td>"));
        assert_eq!(page.matches("<svg").count(), 1);
    }
}
