//! The performance targets, read off the figures of one run: for each, the measured figure,
//! what it is compared with, the ratio and whether it meets the goal. A target whose inputs
//! this run did not measure (its suite not run, `redis-server` not installed,
//! `OPENRAFT_BENCH_BIN` unset) says which input is missing instead of a ratio.
//!
//! 1. Durable writes against one `redis-server --appendfsync always`: SET of 256 B at 50 and
//!    1000 clients, three `raft-node` processes (per engine) and `raft-node dev`, through this
//!    bench's generator and through `redis-benchmark`, at least 1.0x; one client's p50 at most
//!    the disk's append + fdatasync p50 plus two QUIC round trips.
//! 2. The core against openraft's minimal bench: at least 2x its writes per second and 1.5x its
//!    writes per CPU second at 1024 and 4096 clients; ahead of it at 1 client.
//! 3. QUIC against TCP with the same TLS: round trip at most 1.5x, bulk at least 0.8x.
//! 4. Memory per node: idle at most 64 MiB, steady state at most 2.5x the live data.
//! 5. Snapshots larger than memory: a 4 GiB install grows the resident set by at most 256 MiB.
//! 6. Many groups (suite `groups`): at 10,000 idle groups of three replicas, under 2 % of one
//!    core per host and under 4 KiB per group replica (measured for now with the three hosts in
//!    one process on the in-memory transport, not yet as three processes); durable writes over
//!    64 groups at least 2x those over one; after one host of three stops, every group it led
//!    has a new leader within 2x the election timeout.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde_json::{json, Value};

use crate::cluster_suite::SET_REDIS_BENCHMARK;
use crate::durable_writes::{DEV_SET, DISK_LATENCY};
use crate::Figure;

/// What a target asks of its ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Goal {
    /// The ratio must reach this.
    AtLeast(f64),
    /// The ratio must not exceed this.
    AtMost(f64),
}

impl Goal {
    fn met(self, ratio: f64) -> bool {
        match self {
            Goal::AtLeast(g) => ratio >= g,
            Goal::AtMost(g) => ratio <= g,
        }
    }

    fn text(self) -> String {
        match self {
            Goal::AtLeast(g) => format!(">= {g}"),
            Goal::AtMost(g) => format!("<= {g}"),
        }
    }

    /// How far the ratio is towards the goal: 1 meets it exactly, above 1 beats it.
    fn score(self, ratio: f64) -> f64 {
        match self {
            Goal::AtLeast(g) => ratio / g,
            Goal::AtMost(g) => g / ratio.max(1e-9),
        }
    }
}

/// One target's row.
#[derive(Debug)]
pub struct Row {
    /// The target's number in the performance issue.
    pub target: u8,
    /// What is compared.
    pub what: String,
    /// The goal for the ratio.
    pub goal: Goal,
    /// The measured figure, its comparison and the ratio; or what is missing.
    pub outcome: Result<Measured, String>,
}

/// A measured ratio and the two figures it is made of.
#[derive(Debug)]
pub struct Measured {
    /// Ours (or the measured quantity).
    pub ours: f64,
    /// What it is compared with.
    pub theirs: f64,
    /// The unit of both.
    pub unit: &'static str,
    /// `ours / theirs`, to two decimals.
    pub ratio: f64,
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64()
}

/// The first figure of `suite` named `name` whose params hold every `(key, value)` in `with`.
fn find<'a>(
    figures: &'a [Figure],
    suite: &str,
    name: &str,
    with: &[(&str, Value)],
) -> Option<&'a Figure> {
    figures.iter().find(|f| {
        f.suite == suite
            && f.name == name
            && !f
                .values
                .as_object()
                .is_some_and(|v| v.contains_key("error"))
            && with.iter().all(|(k, v)| f.params.get(*k) == Some(v))
    })
}

/// A value of a found figure, or a line naming what is missing.
fn value(
    figures: &[Figure],
    suite: &str,
    name: &str,
    with: &[(&str, Value)],
    key: &str,
) -> Result<f64, String> {
    let f = find(figures, suite, name, with).ok_or_else(|| {
        let with: Vec<String> = with.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("not measured: {suite} `{name}` ({})", with.join(", "))
    })?;
    num(&f.values, key).ok_or_else(|| format!("{suite} `{name}` has no {key}"))
}

fn ratio(
    ours: Result<f64, String>,
    theirs: Result<f64, String>,
    unit: &'static str,
) -> Result<Measured, String> {
    let (ours, theirs) = (ours?, theirs?);
    if theirs <= 0.0 {
        return Err(format!("the comparison figure is {theirs}"));
    }
    Ok(Measured {
        ours,
        theirs,
        unit,
        ratio: (ours / theirs * 100.0).round() / 100.0,
    })
}

/// Every target's rows, from the figures of one run.
pub fn rows(figures: &[Figure]) -> Vec<Row> {
    let mut rows = durable_rows(figures);
    rows.extend(core_rows(figures));
    rows.extend(transport_rows(figures));
    rows.extend(memory_rows(figures));
    rows.extend(snapshot_rows(figures));
    rows.extend(groups_rows(figures));
    rows
}

/// Target 6: 10,000 idle groups.
fn groups_rows(figures: &[Figure]) -> Vec<Row> {
    let with = [("groups", json!(10_000))];
    let get = |key: &str| value(figures, "groups", "idle", &with, key);
    vec![
        Row {
            target: 6,
            what: "idle CPU per host / 2 % of a core, 10,000 groups".into(),
            goal: Goal::AtMost(1.0),
            outcome: ratio(get("cpu_pct_of_core_per_host"), Ok(2.0), "%"),
        },
        Row {
            target: 6,
            what: "resident set per idle group replica / 4 KiB, 10,000 groups".into(),
            goal: Goal::AtMost(1.0),
            outcome: ratio(
                get("rss_bytes_per_replica").map(|b| b / 1024.0),
                Ok(4.0),
                "KiB",
            ),
        },
        Row {
            target: 6,
            what: "durable writes/s, 64 groups / 1 group".into(),
            goal: Goal::AtLeast(2.0),
            outcome: ratio(
                value(
                    figures,
                    "groups",
                    "durable writes",
                    &[("groups", json!(64))],
                    "writes_per_s",
                ),
                value(
                    figures,
                    "groups",
                    "durable writes",
                    &[("groups", json!(1))],
                    "writes_per_s",
                ),
                "writes/s",
            ),
        },
        Row {
            target: 6,
            what: "slowest new leader after a host stops / 2x election timeout, 1,000 groups"
                .into(),
            goal: Goal::AtMost(1.0),
            outcome: {
                let with = [("groups", json!(1_000))];
                ratio(
                    value(figures, "groups", "failover", &with, "new_leader_max_ms"),
                    find(figures, "groups", "failover", &with)
                        .and_then(|f| num(&f.params, "election_timeout_ms"))
                        .map(|t| 2.0 * t)
                        .ok_or_else(|| "not measured: groups `failover` (groups=1000)".to_string()),
                    "ms",
                )
            },
        },
    ]
}

/// A system measured under a load: its label, its figure's name and the params that pick it.
type System = (&'static str, &'static str, Vec<(&'static str, Value)>);

/// Target 1: the systems measured under the redis baseline's loads.
fn durable_rows(figures: &[Figure]) -> Vec<Row> {
    let mut rows = Vec::new();
    let get =
        |name: &str, with: &[(&str, Value)], key: &str| value(figures, "cluster", name, with, key);
    // (label, figure name, extra params) of each system under the bench's own generator.
    let ours: [System; 3] = [
        (
            "3 processes, fjall",
            "writes to leader",
            vec![("storage", json!("fjall")), ("value_bytes", json!(256))],
        ),
        (
            "3 processes, redb",
            "writes to leader",
            vec![("storage", json!("redb")), ("value_bytes", json!(256))],
        ),
        (
            "raft-node dev",
            DEV_SET,
            vec![("generator", json!("resp_load"))],
        ),
    ];
    let by_tool: [System; 3] = [
        (
            "3 processes, fjall",
            SET_REDIS_BENCHMARK,
            vec![("storage", json!("fjall"))],
        ),
        (
            "3 processes, redb",
            SET_REDIS_BENCHMARK,
            vec![("storage", json!("redb"))],
        ),
        (
            "raft-node dev",
            DEV_SET,
            vec![("generator", json!("redis-benchmark"))],
        ),
    ];
    for clients in [50, 1000] {
        let with_clients = |mut w: Vec<(&'static str, Value)>| {
            w.push(("clients", json!(clients)));
            w
        };
        let redis = get(
            "redis SET (baseline)",
            &[("clients", json!(clients))],
            "ops_per_s",
        );
        for (label, name, with) in &ours {
            rows.push(Row {
                target: 1,
                what: format!("SET/s, {label} / redis, {clients} clients (bench generator)"),
                goal: Goal::AtLeast(1.0),
                outcome: ratio(
                    get(name, &with_clients(with.clone()), "ops_per_s"),
                    redis.clone(),
                    "SET/s",
                ),
            });
        }
        let redis = get(
            "redis SET (redis-benchmark)",
            &[("clients", json!(clients))],
            "ops_per_s",
        );
        for (label, name, with) in &by_tool {
            rows.push(Row {
                target: 1,
                what: format!("SET/s, {label} / redis, {clients} clients (redis-benchmark)"),
                goal: Goal::AtLeast(1.0),
                outcome: ratio(
                    get(name, &with_clients(with.clone()), "ops_per_s"),
                    redis.clone(),
                    "SET/s",
                ),
            });
        }
    }
    // One client's floor: the disk's append + fdatasync and two QUIC round trips.
    let disk = get(DISK_LATENCY, &[], "p50_us");
    let rtt = value(figures, "transport", "rtt quic", &[], "p50_us");
    let floor = match (disk, rtt) {
        (Ok(d), Ok(r)) => Ok(d + 2.0 * r),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let one: [System; 3] = [
        (
            "3 processes, fjall",
            "writes to leader",
            vec![
                ("storage", json!("fjall")),
                ("value_bytes", json!(256)),
                ("clients", json!(1)),
            ],
        ),
        (
            "raft-node dev",
            DEV_SET,
            vec![("generator", json!("resp_load")), ("clients", json!(1))],
        ),
        (
            "raft-node dev, redis-benchmark",
            DEV_SET,
            vec![
                ("generator", json!("redis-benchmark")),
                ("clients", json!(1)),
            ],
        ),
    ];
    for (label, name, with) in one {
        rows.push(Row {
            target: 1,
            what: format!("1-client SET p50, {label} / (append + fdatasync p50 + 2 QUIC RTT p50)"),
            goal: Goal::AtMost(1.0),
            outcome: ratio(get(name, &with, "p50_us"), floor.clone(), "us"),
        });
    }
    rows
}

/// Target 2: ours against openraft's minimal bench at the same client count.
fn core_rows(figures: &[Figure]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (clients, rate_goal) in [(1, 1.0), (1024, 2.0), (4096, 2.0)] {
        let with = [("clients", json!(clients))];
        let get = |name: &str, key: &str| value(figures, "core", name, &with, key);
        rows.push(Row {
            target: 2,
            what: format!(
                "core writes/s / openraft, {clients} client{}",
                if clients == 1 { "" } else { "s" }
            ),
            goal: Goal::AtLeast(rate_goal),
            outcome: ratio(
                get("writes", "writes_per_s"),
                get("openraft-minimal", "writes_per_s"),
                "writes/s",
            ),
        });
        if clients > 1 {
            rows.push(Row {
                target: 2,
                what: format!("core writes per CPU s / openraft, {clients} clients"),
                goal: Goal::AtLeast(1.5),
                outcome: ratio(
                    get("writes", "writes_per_cpu_s"),
                    get("openraft-minimal", "writes_per_cpu_s"),
                    "writes/CPU s",
                ),
            });
        }
    }
    rows
}

/// Target 3: QUIC against TCP with the same rustls TLS.
fn transport_rows(figures: &[Figure]) -> Vec<Row> {
    let get = |name: &str, with: &[(&str, Value)], key: &str| {
        value(figures, "transport", name, with, key)
    };
    let mut rows = vec![Row {
        target: 3,
        what: "RPC round trip p50, QUIC / TCP + TLS".into(),
        goal: Goal::AtMost(1.5),
        outcome: ratio(
            get("rtt quic", &[], "p50_us"),
            get("rtt tcp+tls", &[], "p50_us"),
            "us",
        ),
    }];
    for kib in [4, 64] {
        let with = [("payload_bytes", json!(kib << 10))];
        rows.push(Row {
            target: 3,
            what: format!("bulk {kib} KiB, QUIC / TCP + TLS"),
            goal: Goal::AtLeast(0.8),
            outcome: ratio(
                get("bulk quic", &with, "mib_per_s"),
                get("bulk tcp+tls", &with, "mib_per_s"),
                "MiB/s",
            ),
        });
    }
    rows
}

/// Target 4: each engine's worst node, idle and in steady state.
fn memory_rows(figures: &[Figure]) -> Vec<Row> {
    let mut rows = Vec::new();
    for storage in ["fjall", "redb"] {
        let name = format!("resident memory ({storage})");
        let get = |key: &str| value(figures, "memory", &name, &[], key);
        rows.push(Row {
            target: 4,
            what: format!("idle resident set / 64 MiB, {storage}"),
            goal: Goal::AtMost(1.0),
            outcome: ratio(get("idle_worst_mib"), Ok(64.0), "MiB"),
        });
        rows.push(Row {
            target: 4,
            what: format!("steady resident set / live data, {storage}"),
            goal: Goal::AtMost(2.5),
            outcome: ratio(get("steady_worst_mib"), get("live_data_mib"), "MiB"),
        });
    }
    rows
}

/// Target 5: the growth of the resident set while a joining observer installs a snapshot of
/// at least 4 GiB.
fn snapshot_rows(figures: &[Figure]) -> Vec<Row> {
    ["redb", "fjall"]
        .into_iter()
        .map(|engine| {
            let name = format!("install on a joining observer, {engine}");
            let f = find(figures, "snapshot", &name, &[]);
            let outcome = match f {
                None => Err(format!("not measured: snapshot `{name}`")),
                Some(f)
                    if num(&f.params, "state_bytes").is_none_or(|b| b < (4u64 << 30) as f64) =>
                {
                    Err(format!(
                        "the snapshot was below 4 GiB ({})",
                        f.params["state_bytes"]
                    ))
                }
                Some(f) => ratio(
                    num(&f.values, "rss_peak_increase_mib")
                        .ok_or("no rss_peak_increase_mib".to_string()),
                    Ok(256.0),
                    "MiB",
                ),
            };
            Row {
                target: 5,
                what: format!("resident-set growth installing 4 GiB / 256 MiB, {engine}"),
                goal: Goal::AtMost(1.0),
                outcome,
            }
        })
        .collect()
}

/// The rows as figures of the pseudo-suite `targets`, for the JSON file.
pub fn figures(rows: &[Row]) -> Vec<Figure> {
    rows.iter()
        .map(|r| Figure {
            suite: "targets",
            name: r.what.clone(),
            params: json!({ "target": r.target, "goal": r.goal.text() }),
            values: match &r.outcome {
                Ok(m) => json!({
                    "ours": m.ours, "compared_with": m.theirs, "unit": m.unit,
                    "ratio": m.ratio, "met": r.goal.met(m.ratio),
                }),
                Err(why) => json!({ "missing": why }),
            },
        })
        .collect()
}

/// The rows as a text table.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from("targets (ratio, goal, met):\n");
    for r in rows {
        let line = match &r.outcome {
            Ok(m) => format!(
                "  {} {:<88} {:>6.2} ({} vs {} {}) goal {:<6} {}\n",
                r.target,
                r.what,
                m.ratio,
                m.ours,
                m.theirs,
                m.unit,
                r.goal.text(),
                if r.goal.met(m.ratio) {
                    "met"
                } else {
                    "NOT met"
                }
            ),
            Err(why) => format!("  {} {:<88} -- {why}\n", r.target, r.what),
        };
        s += &line;
    }
    s
}

/// Draws each measured target's score (its ratio over the goal, so that 1 meets it and more
/// beats it) as a bar, on a log axis; returns the path, or `None` when nothing was measured.
pub fn chart(rows: &[Row], dir: &Path, prefix: &str) -> Result<Option<PathBuf>, String> {
    let bars: Vec<(String, f64, bool)> = rows
        .iter()
        .filter_map(|r| {
            let m = r.outcome.as_ref().ok()?;
            Some((
                format!("{}: {}", r.target, r.what),
                r.goal.score(m.ratio),
                r.goal.met(m.ratio),
            ))
        })
        .collect();
    if bars.is_empty() {
        return Ok(None);
    }
    let path = crate::charts::path(dir, prefix, "targets.svg");
    draw(&path, &bars).map_err(|e| format!("chart {}: {e}", path.display()))?;
    Ok(Some(path))
}

fn draw(path: &Path, bars: &[(String, f64, bool)]) -> Result<(), Box<dyn std::error::Error>> {
    let height = 120 + 22 * bars.len() as u32;
    let root = SVGBackend::new(path, (1100, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let logs: Vec<f64> = bars.iter().map(|(_, s, _)| s.max(1e-3).log10()).collect();
    let lo = logs
        .iter()
        .copied()
        .fold(0.0f64, f64::min)
        .floor()
        .min(-1.0);
    let hi = logs.iter().copied().fold(0.0f64, f64::max).ceil().max(1.0);
    let n = bars.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "targets: ratio over goal (1 meets it; log scale)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(520)
        .build_cartesian_2d(lo..hi, 0.0..n)?;
    let labels: Vec<String> = bars.iter().map(|(l, _, _)| l.clone()).collect();
    chart
        .configure_mesh()
        .x_labels(((hi - lo) as usize) + 1)
        .x_label_formatter(&|v| format!("{}", 10f64.powf(*v)))
        .y_labels(bars.len())
        .y_label_formatter(&|v| {
            let i = (n - v - 0.5).round();
            if i >= 0.0 && (i as usize) < labels.len() && (v.fract() - 0.5).abs() < 0.01 {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .disable_y_mesh()
        .draw()?;
    chart.draw_series(
        bars.iter()
            .zip(&logs)
            .enumerate()
            .map(|(i, ((_, _, met), log))| {
                let y = n - i as f64;
                let colour = if *met { GREEN.mix(0.7) } else { RED.mix(0.7) };
                Rectangle::new(
                    [(0.0f64.min(*log), y - 0.8), (0.0f64.max(*log), y - 0.2)],
                    colour.filled(),
                )
            }),
    )?;
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, 0.0), (0.0, n)],
        BLACK,
    )))?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(suite: &'static str, name: &str, params: Value, values: Value) -> Figure {
        Figure {
            suite,
            name: name.into(),
            params,
            values,
        }
    }

    #[test]
    fn a_ratio_is_read_off_matching_figures() {
        let figures = vec![
            fig("transport", "rtt quic", json!({}), json!({ "p50_us": 30 })),
            fig(
                "transport",
                "rtt tcp+tls",
                json!({}),
                json!({ "p50_us": 10 }),
            ),
            fig(
                "transport",
                "bulk quic",
                json!({ "payload_bytes": 4096 }),
                json!({ "mib_per_s": 90 }),
            ),
            fig(
                "transport",
                "bulk tcp+tls",
                json!({ "payload_bytes": 4096 }),
                json!({ "mib_per_s": 100 }),
            ),
        ];
        let rows = transport_rows(&figures);
        let rtt = rows[0].outcome.as_ref().unwrap();
        assert_eq!(rtt.ratio, 3.0);
        assert!(!rows[0].goal.met(rtt.ratio));
        let bulk = rows[1].outcome.as_ref().unwrap();
        assert_eq!(bulk.ratio, 0.9);
        assert!(rows[1].goal.met(bulk.ratio));
        // 64 KiB was not measured: the row says so instead of inventing a ratio.
        assert!(
            rows[2]
                .outcome
                .as_ref()
                .unwrap_err()
                .contains("not measured"),
            "{:?}",
            rows[2]
        );
    }

    #[test]
    fn the_one_client_floor_adds_the_disk_and_two_round_trips() {
        let figures = vec![
            fig("cluster", DISK_LATENCY, json!({}), json!({ "p50_us": 100 })),
            fig("transport", "rtt quic", json!({}), json!({ "p50_us": 50 })),
            fig(
                "cluster",
                DEV_SET,
                json!({ "generator": "resp_load", "clients": 1 }),
                json!({ "p50_us": 300 }),
            ),
        ];
        let rows = durable_rows(&figures);
        let dev = rows
            .iter()
            .find(|r| r.what.starts_with("1-client SET p50, raft-node dev /"))
            .unwrap();
        let m = dev.outcome.as_ref().unwrap();
        assert_eq!((m.ours, m.theirs, m.ratio), (300.0, 200.0, 1.5));
        assert!(!dev.goal.met(m.ratio));
    }

    #[test]
    fn failed_figures_and_small_snapshots_do_not_count() {
        let figures = vec![
            fig(
                "memory",
                "resident memory (fjall)",
                json!({}),
                json!({ "error": "boom" }),
            ),
            fig(
                "snapshot",
                "install on a joining observer, redb",
                json!({ "state_bytes": 1 << 20 }),
                json!({ "rss_peak_increase_mib": 3 }),
            ),
        ];
        let memory = memory_rows(&figures);
        assert!(memory[0].outcome.is_err());
        let snapshot = snapshot_rows(&figures);
        assert!(snapshot[0]
            .outcome
            .as_ref()
            .unwrap_err()
            .contains("below 4 GiB"));
    }

    #[test]
    fn the_chart_is_drawn_only_with_a_measured_row() {
        let dir = tempfile::tempdir().unwrap();
        assert!(chart(&rows(&[]), dir.path(), "t").unwrap().is_none());
        let figures = vec![fig(
            "memory",
            "resident memory (redb)",
            json!({}),
            json!({ "idle_worst_mib": 11, "steady_worst_mib": 500, "live_data_mib": 250 }),
        )];
        let path = chart(&rows(&figures), dir.path(), "t").unwrap().unwrap();
        let svg = std::fs::read_to_string(path).unwrap();
        assert!(svg.contains("<svg"), "{svg}");
    }
}
