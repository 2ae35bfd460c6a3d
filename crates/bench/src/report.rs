//! Reports: the human-readable table (`report.txt`, also printed), the JSON report
//! (`report.json`) with the exact configuration, command line, git revision and host, and
//! the list of plots written.
//!
//! Owns: [`Table`] (aligned text columns), [`Report`], [`git_revision`], [`host_info`].

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A text table with right-aligned numeric columns.
#[derive(Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }
    pub fn row(&mut self, r: Vec<String>) {
        self.rows.push(r);
    }
    pub fn render(&self) -> String {
        let n = self.header.len();
        let mut w = vec![0; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let cells: Vec<String> = (0..n)
                .map(|i| {
                    let c = r.get(i).map_or("", |s| s.as_str());
                    if i == 0 {
                        format!("{c:<width$}", width = w[i])
                    } else {
                        format!("{c:>width$}", width = w[i])
                    }
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        };
        let mut s = line(&self.header);
        s.push('\n');
        s.push_str(&"-".repeat(w.iter().sum::<usize>() + 2 * (n.saturating_sub(1))));
        s.push('\n');
        for r in &self.rows {
            s.push_str(&line(r));
            s.push('\n');
        }
        s
    }
}

/// Format a number with sensible precision for a table.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x == 0.0 {
        "0".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Everything one `flashlog bench` run writes.
pub struct Report {
    pub experiment: String,
    pub out: PathBuf,
    pub config: Value,
    /// Text sections (title, body) printed and written to report.txt.
    pub sections: Vec<(String, String)>,
    pub results: Value,
    pub extra: serde_json::Map<String, Value>,
    pub plots: Vec<PathBuf>,
    pub started: std::time::SystemTime,
}

impl Report {
    pub fn new(experiment: &str, out: &Path, config: Value) -> Report {
        Report {
            experiment: experiment.to_string(),
            out: out.to_path_buf(),
            config,
            sections: Vec::new(),
            results: Value::Null,
            extra: Default::default(),
            plots: Vec::new(),
            started: std::time::SystemTime::now(),
        }
    }

    pub fn section(&mut self, title: &str, body: String) {
        self.sections.push((title.to_string(), body));
    }

    /// The report as text.
    pub fn text(&self) -> String {
        let mut s = format!(
            "flashlog bench {} (git {})\n{}\n",
            self.experiment,
            git_revision(),
            self.config
                .get("command")
                .and_then(|c| c.as_str())
                .unwrap_or("")
        );
        for (t, b) in &self.sections {
            s.push_str(&format!("\n== {t} ==\n{b}"));
        }
        if !self.plots.is_empty() {
            s.push_str("\nplots:\n");
            for p in &self.plots {
                s.push_str(&format!("  {}\n", p.display()));
            }
        }
        s
    }

    /// The report as JSON.
    pub fn json(&self) -> Value {
        let started = self
            .started
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut v = json!({
            "experiment": self.experiment,
            "git_revision": git_revision(),
            "started_unix_s": started,
            "host": host_info(),
            "config": self.config,
            "results": self.results,
            "plots": self.plots.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        });
        if let Value::Object(m) = &mut v {
            for (k, x) in &self.extra {
                m.insert(k.clone(), x.clone());
            }
        }
        v
    }

    /// Write report.txt and report.json into the out dir; print the text.
    pub fn write(&self) -> Result<()> {
        let txt = self.text();
        std::fs::write(self.out.join("report.txt"), &txt)
            .with_context(|| format!("writing {}/report.txt", self.out.display()))?;
        std::fs::write(
            self.out.join("report.json"),
            serde_json::to_string_pretty(&self.json())?,
        )
        .with_context(|| format!("writing {}/report.json", self.out.display()))?;
        // The files hold the report; a reader that went away (`flashlog bench ... | head`)
        // misses only the copy on stdout, without a panic at the end of a long run.
        use std::io::Write;
        let _ = writeln!(
            std::io::stdout(),
            "{txt}\nwrote {}/report.txt and {}/report.json",
            self.out.display(),
            self.out.display()
        );
        Ok(())
    }
}

/// The git revision the binary was built from (`git rev-parse HEAD`, + "-dirty" with
/// uncommitted changes to tracked files; recorded by `build.rs`), so that a report names the
/// code that ran even when the binary was copied elsewhere or the checkout moved on since the
/// build; "unknown" when it was not built in a git checkout.
pub fn git_revision() -> String {
    match env!("FLASHLOG_BUILD_REV") {
        "" => "unknown".into(),
        rev => rev.into(),
    }
}

/// CPU count, model, kernel and memory.
pub fn host_info() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|s| s.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mem_kb = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    json!({
        "cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "cpu_model": model,
        "kernel": kernel,
        "mem_gib": mem_kb as f64 / (1 << 20) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns() {
        let mut t = Table::new(&["policy", "MiB/s"]);
        t.row(vec!["f2fs".into(), num(123.456)]);
        t.row(vec!["f2fs-lfs".into(), num(1.5)]);
        let s = t.render();
        assert!(s.contains("f2fs-lfs   1.50"), "{s}");
        assert!(s.contains("f2fs        123"), "{s}");
    }
}
