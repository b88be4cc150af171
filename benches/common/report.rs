//! The results table: one row per figure with its median over the runs, its ratio to the ceiling
//! measured in the same run (where there is one) and the team's target with ✓/✗. Targets are
//! printed, never asserted. Every row is also printed as one JSON line.

/// A figure's target: its text and whether the median meets it.
pub struct Target {
    pub text: String,
    pub met: bool,
}

pub struct Row {
    pub figure: String,
    pub unit: &'static str,
    /// One value per run.
    pub values: Vec<f64>,
    /// One ratio per run, and what it is a ratio to.
    pub ratios: Vec<f64>,
    pub ratio_to: String,
    pub target: Option<Target>,
}

pub struct Table {
    bench: &'static str,
    title: String,
    rows: Vec<Row>,
}

impl Table {
    pub fn new(bench: &'static str, title: impl Into<String>) -> Table {
        Table {
            bench,
            title: title.into(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, figure: &str, unit: &'static str) -> &mut Row {
        match self.rows.iter().position(|r| r.figure == figure) {
            Some(i) => &mut self.rows[i],
            None => {
                self.rows.push(Row {
                    figure: figure.to_owned(),
                    unit,
                    values: Vec::new(),
                    ratios: Vec::new(),
                    ratio_to: String::new(),
                    target: None,
                });
                self.rows.last_mut().unwrap()
            }
        }
    }

    /// Records one run's value of `figure`.
    pub fn add(&mut self, figure: &str, unit: &'static str, value: f64) {
        self.row(figure, unit).values.push(value);
    }

    /// Records one run's value of `figure` and its ratio to `to` (a figure of the same run).
    pub fn add_ratio(
        &mut self,
        figure: &str,
        unit: &'static str,
        value: f64,
        ratio: f64,
        to: impl Into<String>,
    ) {
        let row = self.row(figure, unit);
        row.values.push(value);
        row.ratios.push(ratio);
        row.ratio_to = to.into();
    }

    /// The median of `figure` over the runs so far.
    pub fn median(&self, figure: &str) -> f64 {
        self.rows
            .iter()
            .find(|r| r.figure == figure)
            .map_or(f64::NAN, |r| super::median(&r.values))
    }

    /// The latest run's value of `figure`.
    pub fn last(&self, figure: &str) -> f64 {
        self.rows
            .iter()
            .find(|r| r.figure == figure)
            .and_then(|r| r.values.last().copied())
            .unwrap_or(f64::NAN)
    }

    /// Whether the table has a row `figure`.
    pub fn has(&self, figure: &str) -> bool {
        self.rows.iter().any(|r| r.figure == figure)
    }

    /// The worst (largest) value of `figure` over the runs.
    pub fn max(&self, figure: &str) -> f64 {
        self.rows
            .iter()
            .find(|r| r.figure == figure)
            .map_or(f64::NAN, |r| {
                r.values.iter().copied().fold(f64::NAN, f64::max)
            })
    }

    /// The best (smallest) value of `figure` over the runs.
    pub fn min(&self, figure: &str) -> f64 {
        self.rows
            .iter()
            .find(|r| r.figure == figure)
            .map_or(f64::NAN, |r| {
                r.values.iter().copied().fold(f64::NAN, f64::min)
            })
    }

    /// The median ratio of `figure`.
    pub fn ratio(&self, figure: &str) -> f64 {
        self.rows
            .iter()
            .find(|r| r.figure == figure)
            .map_or(f64::NAN, |r| super::median(&r.ratios))
    }

    /// Sets `figure`'s target; `met` is judged by the caller on the medians.
    pub fn target(&mut self, figure: &str, text: impl Into<String>, met: bool) {
        if let Some(row) = self.rows.iter_mut().find(|r| r.figure == figure) {
            row.target = Some(Target {
                text: text.into(),
                met,
            });
        }
    }

    /// Prints the table, then one JSON line per figure.
    pub fn print(&self) {
        let width = self.rows.iter().map(|r| r.figure.len()).max().unwrap_or(6);
        println!("\n{}", self.title);
        println!(
            "{:<width$}  {:>12}  {:<6}  {:>22}  target",
            "figure", "median", "unit", "ratio (same run)"
        );
        println!("{}", "─".repeat(width + 70));
        for row in &self.rows {
            let ratio = if row.ratios.is_empty() {
                String::new()
            } else {
                format!("{:.2}× {}", super::median(&row.ratios), row.ratio_to)
            };
            let target = row.target.as_ref().map_or(String::new(), |t| {
                format!("{} {}", if t.met { "✓" } else { "✗" }, t.text)
            });
            println!(
                "{:<width$}  {:>12}  {:<6}  {:>22}  {}",
                row.figure,
                number(super::median(&row.values)),
                row.unit,
                ratio,
                target
            );
        }
        for row in &self.rows {
            println!("{}", self.json(row));
        }
    }

    fn json(&self, row: &Row) -> String {
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| json_number(*x))
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut line = format!(
            "{{\"bench\":\"{}\",\"figure\":\"{}\",\"unit\":\"{}\",\"median\":{},\"runs\":[{}]",
            self.bench,
            escape(&row.figure),
            escape(row.unit),
            json_number(super::median(&row.values)),
            list(&row.values)
        );
        if !row.ratios.is_empty() {
            line += &format!(
                ",\"ratio\":{},\"ratio_to\":\"{}\"",
                json_number(super::median(&row.ratios)),
                escape(&row.ratio_to)
            );
        }
        if let Some(t) = &row.target {
            line += &format!(",\"target\":\"{}\",\"met\":{}", escape(&t.text), t.met);
        }
        line + "}"
    }
}

/// A readable number: no decimals for large values, three significant-ish ones for small.
fn number(x: f64) -> String {
    if !x.is_finite() {
        "—".into()
    } else if x.abs() >= 1000.0 || x == x.trunc() {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

fn json_number(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "null".into()
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
