//! SVG charts drawn from the figures of a run (the same figures the JSON file holds), with
//! `plotters`' SVG backend: throughput against concurrency (core writes, reads per mode),
//! latency percentiles against concurrency, the latency CDF of core writes per client count,
//! read scaling across replicas, the cluster suite's workloads per storage engine, and the
//! latency of each request kind of its mixed workload.
//!
//! Concurrency is drawn on a log2 axis and latency on a log10 axis; both are plain linear axes
//! over the logarithms, labelled with the original values, so that every chart uses one kind of
//! coordinate. Text is left to the SVG viewer (no font is rasterized here).

use std::error::Error;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde_json::Value;

use crate::Figure;

/// The charts a suite produces, by file name suffix.
pub fn expected(suite: &str) -> &'static [&'static str] {
    match suite {
        "core" => &[
            "core-throughput.svg",
            "core-latency.svg",
            "core-latency-cdf.svg",
        ],
        "reads" => &[
            "reads-throughput.svg",
            "reads-latency.svg",
            "reads-scaling.svg",
        ],
        "cluster" => &["cluster-throughput.svg", "cluster-mixed-latency.svg"],
        _ => &[],
    }
}

/// Where the charts of a run go and how they are named: next to the JSON file and after its
/// stem, or `target/bench/bench-*.svg` without one.
pub fn place(json: Option<&str>) -> (PathBuf, String) {
    let Some(json) = json.map(Path::new) else {
        return (PathBuf::from("target/bench"), "bench".into());
    };
    let dir = json
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let prefix = json
        .file_stem()
        .map_or_else(|| "bench".into(), |s| s.to_string_lossy().into_owned());
    (dir, prefix)
}

/// The path of chart `name` for a run whose files are named with `prefix`.
pub fn path(dir: &Path, prefix: &str, name: &str) -> PathBuf {
    dir.join(format!("{prefix}-{name}"))
}

/// Fails unless every chart of `suites` exists and is not empty.
pub fn check(dir: &Path, prefix: &str, suites: &[String]) -> Result<(), String> {
    for suite in suites {
        for name in expected(suite) {
            let p = path(dir, prefix, name);
            match std::fs::metadata(&p) {
                Ok(m) if m.len() > 0 => {}
                _ => return Err(format!("chart {} is missing", p.display())),
            }
        }
    }
    Ok(())
}

/// One line of a chart: label and points in data units.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    /// Drawn thin with larger markers, to tell a p99 from the p50 of the same colour.
    thin: bool,
    colour: usize,
}

/// Line colours, distinct on white (plotters' palette has a pale yellow).
const COLOURS: [RGBColor; 8] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x7f, 0x7f, 0x7f),
];

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// Points `(x, y)` of the figures of `suite` named `name`, x from `params[x]`, y from
/// `values[y]`, sorted by x.
fn points(figures: &[Figure], suite: &str, name: &str, x: &str, y: &str) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = figures
        .iter()
        .filter(|f| f.suite == suite && f.name == name)
        .filter_map(|f| Some((num(&f.params, x)?, num(&f.values, y)?)))
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The distinct names of `suite`'s figures whose name does not start with `skip`, in order.
fn names(figures: &[Figure], suite: &str, skip: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in figures.iter().filter(|f| f.suite == suite) {
        if !f.name.starts_with(skip) && !out.contains(&f.name) {
            out.push(f.name.clone());
        }
    }
    out
}

/// A horizontal reference line.
struct Target {
    y: f64,
    label: String,
}

struct Chart<'a> {
    title: &'a str,
    /// The x axis is latency (log10) rather than concurrency (log2).
    x_latency: bool,
    x_desc: &'a str,
    y_desc: &'a str,
    log_y: bool,
    series: Vec<Series>,
    targets: Vec<Target>,
}

fn draw(path: &Path, chart: &Chart<'_>) -> Result<(), Box<dyn Error>> {
    let tx = |x: f64| {
        if chart.x_latency {
            x.max(1e-3).log10()
        } else {
            x.max(1e-9).log2()
        }
    };
    let ty = |y: f64| {
        if chart.log_y {
            y.max(1e-3).log10()
        } else {
            y
        }
    };
    let all: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, y)| (tx(x), ty(y))))
        .chain(chart.targets.iter().map(|t| (f64::NAN, ty(t.y))))
        .collect();
    let (mut x0, mut x1) = bounds(all.iter().map(|p| p.0));
    let (mut y0, mut y1) = bounds(all.iter().map(|p| p.1));
    // A single level still gets a visible range.
    if x1 - x0 < 1.0 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    if chart.log_y {
        y0 = y0.floor();
        y1 = y1.ceil().max(y0 + 1.0);
    } else {
        y0 = 0.0;
        y1 = if y1 > 0.0 { y1 * 1.15 } else { 1.0 };
    }
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(x0 - 0.2..x1 + 0.2, y0..y1)?;
    let log_y = chart.log_y;
    let x_latency = chart.x_latency;
    // One label per power of two (and of ten on a log axis): a step of 1 in log space.
    let x_labels = (x1 - x0).round() as usize + 1;
    let y_labels = if log_y {
        (y1 - y0).round() as usize + 1
    } else {
        10
    };
    ctx.configure_mesh()
        .x_labels(x_labels)
        .y_labels(y_labels)
        .x_desc(chart.x_desc)
        .y_desc(chart.y_desc)
        .x_label_formatter(&|v| {
            if x_latency {
                short(10f64.powf(*v))
            } else {
                format!("{}", 2f64.powf(*v).round())
            }
        })
        .y_label_formatter(&|v| {
            if log_y {
                short(10f64.powf(*v))
            } else {
                short(*v)
            }
        })
        .draw()?;
    for s in &chart.series {
        let colour = COLOURS[s.colour % COLOURS.len()];
        let style = if s.thin {
            colour.stroke_width(1)
        } else {
            colour.stroke_width(3)
        };
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), ty(y))).collect();
        ctx.draw_series(LineSeries::new(pts.clone(), style))?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        let marker = if s.thin { 4 } else { 3 };
        ctx.draw_series(
            pts.into_iter()
                .map(move |p| Circle::new(p, marker, colour.filled())),
        )?;
    }
    for (i, t) in chart.targets.iter().enumerate() {
        let style = BLACK.mix(0.7 - 0.3 * i as f64).stroke_width(2);
        let y = ty(t.y);
        ctx.draw_series(LineSeries::new(vec![(x0 - 0.2, y), (x1 + 0.2, y)], style))?
            .label(t.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
    }
    ctx.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    }
}

/// 1234567 -> "1.23M", 800000 -> "800k", 0.25 -> "0.25".
fn short(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let digits = format!("{scaled:.2}");
    let digits = digits.trim_end_matches('0').trim_end_matches('.');
    format!("{digits}{suffix}")
}

/// Writes every chart the figures allow into `dir`, named `<prefix>-<chart>.svg`; returns the
/// paths written.
pub fn write(figures: &[Figure], dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut charts = core_charts(figures);
    charts.extend(reads_charts(figures));
    charts.extend(cluster_charts(figures));
    let mut written = Vec::new();
    for (name, chart) in &charts {
        let p = path(dir, prefix, name);
        draw(&p, chart).map_err(|e| format!("chart {}: {e}", p.display()))?;
        written.push(p);
    }
    Ok(written)
}

/// The core suite's charts: throughput and latency percentiles against clients.
fn core_charts(figures: &[Figure]) -> Vec<(&'static str, Chart<'static>)> {
    let mut charts = Vec::new();
    let core = points(figures, "core", "writes", "clients", "writes_per_s");
    if !core.is_empty() {
        charts.push((
            "core-throughput.svg",
            Chart {
                x_latency: false,
                title: "core: writes per second against clients (3 voters, in-process)",
                x_desc: "concurrent clients",
                y_desc: "writes/s",
                log_y: false,
                series: vec![Series {
                    label: "writes/s".into(),
                    points: core,
                    thin: false,
                    colour: 0,
                }],
                targets: vec![],
            },
        ));
        let series = [("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9")]
            .iter()
            .enumerate()
            .map(|(i, (key, label))| Series {
                label: (*label).into(),
                points: points(figures, "core", "writes", "clients", key),
                thin: false,
                colour: i,
            })
            .collect();
        charts.push((
            "core-latency.svg",
            Chart {
                x_latency: false,
                title: "core: write latency percentiles against clients",
                x_desc: "concurrent clients",
                y_desc: "latency (us, log)",
                log_y: true,
                series,
                targets: vec![],
            },
        ));
        let series = figures
            .iter()
            .filter(|f| f.suite == "core" && f.name == "writes")
            .enumerate()
            .filter_map(|(i, f)| {
                let clients = num(&f.params, "clients")?;
                let points = f
                    .values
                    .get("cdf_us")?
                    .as_array()?
                    .iter()
                    .filter_map(|qv| Some((qv.get(1)?.as_f64()?, qv.get(0)?.as_f64()?)))
                    .collect();
                Some(Series {
                    label: format!("{clients} clients"),
                    points,
                    thin: false,
                    colour: i,
                })
            })
            .collect();
        charts.push((
            "core-latency-cdf.svg",
            Chart {
                x_latency: true,
                title: "core: write latency CDF per client count",
                x_desc: "latency (us, log)",
                y_desc: "fraction of writes at or below",
                log_y: false,
                series,
                targets: vec![],
            },
        ));
    }
    charts
}

/// The reads suite's charts: throughput and latency per mode, and read scaling.
fn reads_charts(figures: &[Figure]) -> Vec<(&'static str, Chart<'static>)> {
    let mut charts = Vec::new();
    let modes = names(figures, "reads", "scaling");
    if !modes.is_empty() {
        let per_mode = |key: &str, label: &str, thin: bool| -> Vec<Series> {
            modes
                .iter()
                .enumerate()
                .map(|(i, m)| Series {
                    label: format!("{m}{label}"),
                    points: points(figures, "reads", m, "readers", key),
                    thin,
                    colour: i,
                })
                .collect()
        };
        charts.push((
            "reads-throughput.svg",
            Chart {
                x_latency: false,
                title: "reads: reads per second against readers, per mode (3 voters)",
                x_desc: "concurrent readers",
                y_desc: "reads/s",
                log_y: false,
                series: per_mode("reads_per_s", "", false),
                targets: vec![],
            },
        ));
        let mut latency = per_mode("p50_us", " p50", false);
        latency.extend(per_mode("p99_us", " p99", true));
        charts.push((
            "reads-latency.svg",
            Chart {
                x_latency: false,
                title: "reads: latency p50 (thick) and p99 (thin) against readers",
                x_desc: "concurrent readers",
                y_desc: "latency (us, log)",
                log_y: true,
                series: latency,
                targets: vec![],
            },
        ));
        charts.push(("reads-scaling.svg", scaling_chart(figures)));
    }
    charts
}

/// Points `(clients, values[y])` of the cluster figures named `name` on `storage`, leaving out
/// the payload sweep (values other than 256 B), sorted by clients.
fn cluster_points(figures: &[Figure], name: &str, storage: &str, y: &str) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = figures
        .iter()
        .filter(|f| f.suite == "cluster" && f.name == name)
        .filter(|f| f.params.get("storage").and_then(Value::as_str) == Some(storage))
        .filter(|f| num(&f.params, "value_bytes").is_none_or(|v| v == 256.0))
        .filter_map(|f| Some((num(&f.params, "clients")?, num(&f.values, y)?)))
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The cluster suite's charts: every workload's throughput against clients (one line per
/// workload and storage engine), and the mixed workload's latency per request kind.
fn cluster_charts(figures: &[Figure]) -> Vec<(&'static str, Chart<'static>)> {
    let mut storages: Vec<&str> = Vec::new();
    let mut workloads: Vec<&str> = Vec::new();
    for f in figures.iter().filter(|f| f.suite == "cluster") {
        // The redis baselines have no storage engine and are left out.
        let Some(storage) = f.params.get("storage").and_then(Value::as_str) else {
            continue;
        };
        if !storages.contains(&storage) {
            storages.push(storage);
        }
        if !workloads.contains(&f.name.as_str()) {
            workloads.push(&f.name);
        }
    }
    if storages.is_empty() {
        return Vec::new();
    }
    let mut throughput = Vec::new();
    let mut mixed = Vec::new();
    for (s, storage) in storages.iter().enumerate() {
        for (w, workload) in workloads.iter().enumerate() {
            throughput.push(Series {
                label: format!("{storage}: {workload}"),
                points: cluster_points(figures, workload, storage, "ops_per_s"),
                thin: s > 0,
                colour: w,
            });
        }
        for (k, kind) in crate::mixed_workload::KINDS.iter().enumerate() {
            for (percentile, thin) in [("p50", false), ("p99", true)] {
                let key = format!("{}_{percentile}_us", kind.to_ascii_lowercase());
                mixed.push(Series {
                    label: format!("{storage}: {kind} {percentile}"),
                    points: cluster_points(figures, crate::cluster_suite::MIXED, storage, &key),
                    thin,
                    colour: k + s * crate::mixed_workload::KINDS.len(),
                });
            }
        }
    }
    vec![
        (
            "cluster-throughput.svg",
            Chart {
                x_latency: false,
                title: "cluster: operations per second against clients (thick: first engine)",
                x_desc: "concurrent clients",
                y_desc: "operations/s (log)",
                log_y: true,
                series: throughput,
                targets: vec![],
            },
        ),
        (
            "cluster-mixed-latency.svg",
            Chart {
                x_latency: false,
                title: "cluster: mixed workload latency per request kind, p50 (thick), p99 (thin)",
                x_desc: "concurrent clients",
                y_desc: "latency (us, log)",
                log_y: true,
                series: mixed,
                targets: vec![],
            },
        ),
    ]
}

/// Spreading reads over the replicas against serving them on the leader: throughput and leader
/// CPU per read as ratios, with the targets of the bench issue.
fn scaling_chart(figures: &[Figure]) -> Chart<'static> {
    let mut scaling = Vec::new();
    for (i, (name, what)) in [
        ("scaling linearizable-all", "linearizable on all replicas"),
        (
            "scaling linearizable-followers",
            "linearizable on followers",
        ),
        ("scaling lease-all", "lease on all replicas"),
    ]
    .into_iter()
    .enumerate()
    {
        scaling.push(Series {
            label: format!("{what}: throughput / leader only"),
            points: points(figures, "reads", name, "readers", "throughput_ratio"),
            thin: false,
            colour: i,
        });
        scaling.push(Series {
            label: format!("{what}: leader CPU per read / leader only"),
            points: points(figures, "reads", name, "readers", "leader_cpu_ratio"),
            thin: true,
            colour: i,
        });
    }
    Chart {
        x_latency: false,
        title: "reads spread / on the leader only (thick: throughput, thin: leader CPU per read)",
        x_desc: "concurrent readers",
        y_desc: "ratio",
        log_y: false,
        series: scaling,
        targets: vec![
            Target {
                y: 1.5,
                label: "throughput target (>= 1.5)".into(),
            },
            Target {
                y: 0.2,
                label: "leader CPU target (<= 0.2)".into(),
            },
        ],
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn figure(suite: &'static str, name: &str, params: Value, values: Value) -> Figure {
        Figure {
            suite,
            name: name.into(),
            params,
            values,
        }
    }

    fn figures() -> Vec<Figure> {
        let mut out = Vec::new();
        for (clients, rate) in [(1, 1000.0), (64, 50_000.0)] {
            out.push(figure(
                "core",
                "writes",
                json!({ "clients": clients }),
                json!({
                    "writes_per_s": rate, "p50_us": 20, "p99_us": 80, "p999_us": 900,
                    "cdf_us": [[0.5, 20], [0.99, 80], [1.0, 1500]],
                }),
            ));
        }
        for mode in ["linearizable-leader", "linearizable-all"] {
            out.push(figure(
                "reads",
                mode,
                json!({ "readers": 8 }),
                json!({ "reads_per_s": 9000.0, "p50_us": 40, "p99_us": 300 }),
            ));
        }
        out.push(figure(
            "reads",
            "scaling linearizable-all",
            json!({ "readers": 8 }),
            json!({ "throughput_ratio": 1.2, "leader_cpu_ratio": 0.4 }),
        ));
        for clients in [1, 16] {
            out.push(figure(
                "cluster",
                "writes to leader",
                json!({ "storage": "fjall", "clients": clients, "value_bytes": 256 }),
                json!({ "ops_per_s": 900.0 * clients as f64, "p50_us": 900 }),
            ));
            out.push(figure(
                "cluster",
                crate::cluster_suite::MIXED,
                json!({ "storage": "fjall", "clients": clients }),
                json!({
                    "ops_per_s": 2000.0, "hgetall_p50_us": 300, "hgetall_p99_us": 900,
                    "zincrby_p50_us": 1200, "zincrby_p99_us": 4000,
                }),
            ));
        }
        out.push(figure(
            "cluster",
            "redis SET (baseline)",
            json!({ "clients": 1 }),
            json!({ "ops_per_s": 3000.0 }),
        ));
        out
    }

    #[test]
    fn every_expected_chart_is_written_from_the_figures() {
        let dir = tempfile::tempdir().expect("temp dir");
        let written = write(&figures(), dir.path(), "run").expect("charts");
        assert_eq!(written.len(), 8, "{written:?}");
        let suites = vec![
            "core".to_string(),
            "reads".to_string(),
            "cluster".to_string(),
        ];
        check(dir.path(), "run", &suites).expect("every chart exists");
        let svg = std::fs::read_to_string(path(dir.path(), "run", "reads-throughput.svg"))
            .expect("chart");
        assert!(svg.starts_with("<svg"), "an SVG document");
        assert!(svg.contains("linearizable-all"), "one line per read mode");
        let svg = std::fs::read_to_string(path(dir.path(), "run", "cluster-throughput.svg"))
            .expect("chart");
        assert!(
            svg.contains("fjall: mixed: sessions"),
            "the mixed workload is drawn"
        );
        assert!(!svg.contains("redis SET"), "baselines have no engine");
        let svg = std::fs::read_to_string(path(dir.path(), "run", "cluster-mixed-latency.svg"))
            .expect("chart");
        assert!(
            svg.contains("fjall: ZINCRBY p99"),
            "one line per kind and percentile"
        );
    }

    #[test]
    fn check_reports_a_missing_chart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let core_only: Vec<Figure> = figures()
            .into_iter()
            .filter(|f| f.suite == "core")
            .collect();
        write(&core_only, dir.path(), "run").expect("charts");
        check(dir.path(), "run", &["core".to_string()]).expect("core charts exist");
        let err = check(dir.path(), "run", &["reads".to_string()]).expect_err("no reads charts");
        assert!(err.contains("reads-throughput.svg"), "{err}");
    }

    #[test]
    fn axis_labels_are_short() {
        assert_eq!(short(1_234_567.0), "1.23M");
        assert_eq!(short(800_000.0), "800k");
        assert_eq!(short(100.0), "100");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(0.0), "0");
    }

    #[test]
    fn charts_go_next_to_the_json_file() {
        assert_eq!(
            place(Some("target/bench/quick.json")),
            (PathBuf::from("target/bench"), "quick".to_string())
        );
        assert_eq!(place(Some("out.json")), (PathBuf::from("."), "out".into()));
        assert_eq!(place(None), (PathBuf::from("target/bench"), "bench".into()));
    }
}
