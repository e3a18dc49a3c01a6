//! Kubelet's `/metrics/resource`: the Prometheus text metrics-server (v0.6+) scrapes instead
//! of the Summary, drawn from a [`Summary`] as kubelet draws it from its own.
//!
//! The page is written as kubelet's Prometheus registry writes it, which metrics-server's
//! parser and `kubectl top` rely on:
//! - families sorted by name, a family only when it has a sample, each with `# HELP` (text
//!   prefixed with its stability level, `[STABLE]` or `[ALPHA]`) and `# TYPE`;
//! - labels sorted by name (`container`, `namespace`, `pod`), samples sorted by label values;
//! - CPU and memory samples stamped with their reading's time in milliseconds (metrics-server
//!   computes CPU rates from two stamped counters), start times unstamped;
//! - numbers as Go's `strconv.FormatFloat(v, 'g', -1, 64)`: shortest digits, exponent form
//!   from 1e6 up and below 1e-4 (`1.139712e+06`);
//! - `resource_scrape_error` (and the older `scrape_error`, which kubelet 1.29 deprecated and
//!   clients of older kubelets still read) is 1 when the Summary could not be gathered, and
//!   then the only family.

use std::fmt::Write as _;

use super::summary::{Summary, Time};

/// The `Content-Type` kubelet answers the page with (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One sample: label pairs (sorted by name), value, optional stamp.
struct Sample {
    labels: Vec<(&'static str, String)>,
    value: f64,
    time: Option<Time>,
}

/// A family being filled.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<Sample>,
}

impl Family {
    fn new(name: &'static str, help: &'static str, kind: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }
}

/// The page of `summary`, or with `None` (the Summary could not be gathered) the page that
/// says so (module docs).
pub fn render(summary: Option<&Summary>) -> String {
    let mut container_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
        "counter",
    );
    let mut container_memory = Family::new(
        "container_memory_working_set_bytes",
        "[STABLE] Current working set of the container in bytes",
        "gauge",
    );
    let mut container_start = Family::new(
        "container_start_time_seconds",
        "[STABLE] Start time of the container since unix epoch in seconds",
        "gauge",
    );
    let mut node_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
        "counter",
    );
    let mut node_memory = Family::new(
        "node_memory_working_set_bytes",
        "[STABLE] Current working set of the node in bytes",
        "gauge",
    );
    let mut pod_cpu = Family::new(
        "pod_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        "counter",
    );
    let mut pod_memory = Family::new(
        "pod_memory_working_set_bytes",
        "[STABLE] Current working set of the pod in bytes",
        "gauge",
    );
    let mut scrape_error = Family::new(
        "resource_scrape_error",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    );
    let mut old_scrape_error = Family::new(
        "scrape_error",
        "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container \
         metrics, 0 otherwise",
        "gauge",
    );
    let failed = summary.is_none();
    for family in [&mut scrape_error, &mut old_scrape_error] {
        family.samples.push(Sample {
            labels: Vec::new(),
            value: if failed { 1.0 } else { 0.0 },
            time: None,
        });
    }
    if let Some(summary) = summary {
        let node = &summary.node;
        if let Some(cpu) = node.cpu
            && let Some(ns) = cpu.usage_core_nano_seconds
        {
            node_cpu.samples.push(Sample {
                labels: Vec::new(),
                value: seconds(ns),
                time: Some(cpu.time),
            });
        }
        if let Some(memory) = node.memory
            && let Some(bytes) = memory.working_set_bytes
        {
            node_memory.samples.push(Sample {
                labels: Vec::new(),
                value: bytes as f64,
                time: Some(memory.time),
            });
        }
        for pod in &summary.pods {
            let namespace = &pod.pod_ref.namespace;
            let name = &pod.pod_ref.name;
            for c in &pod.containers {
                let labels = || {
                    vec![
                        ("container", c.name.clone()),
                        ("namespace", namespace.clone()),
                        ("pod", name.clone()),
                    ]
                };
                if c.start_time.unix_ms >= 1000 {
                    container_start.samples.push(Sample {
                        labels: labels(),
                        value: c.start_time.unix_ms as f64 / 1000.0,
                        time: None,
                    });
                }
                if let Some(cpu) = c.cpu
                    && let Some(ns) = cpu.usage_core_nano_seconds
                {
                    container_cpu.samples.push(Sample {
                        labels: labels(),
                        value: seconds(ns),
                        time: Some(cpu.time),
                    });
                }
                if let Some(memory) = c.memory
                    && let Some(bytes) = memory.working_set_bytes
                {
                    container_memory.samples.push(Sample {
                        labels: labels(),
                        value: bytes as f64,
                        time: Some(memory.time),
                    });
                }
            }
            let labels = || vec![("namespace", namespace.clone()), ("pod", name.clone())];
            if let Some(cpu) = pod.cpu
                && let Some(ns) = cpu.usage_core_nano_seconds
            {
                pod_cpu.samples.push(Sample {
                    labels: labels(),
                    value: seconds(ns),
                    time: Some(cpu.time),
                });
            }
            if let Some(memory) = pod.memory
                && let Some(bytes) = memory.working_set_bytes
            {
                pod_memory.samples.push(Sample {
                    labels: labels(),
                    value: bytes as f64,
                    time: Some(memory.time),
                });
            }
        }
    }
    let mut out = String::new();
    // Already in name order.
    for mut family in [
        container_cpu,
        container_memory,
        container_start,
        node_cpu,
        node_memory,
        pod_cpu,
        pod_memory,
        scrape_error,
        old_scrape_error,
    ] {
        write_family(&mut out, &mut family);
    }
    out
}

fn seconds(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

fn write_family(out: &mut String, family: &mut Family) {
    if family.samples.is_empty() {
        return;
    }
    // Sorted by label values; a second sample with the same labels (two pods of one name
    // while one is replaced) would make the page invalid, so the later one wins alone.
    family.samples.sort_by(|a, b| {
        let values = |s: &Sample| s.labels.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>();
        values(a).cmp(&values(b)).then(b.time.cmp(&a.time))
    });
    family.samples.dedup_by(|b, a| a.labels == b.labels);
    let _ = writeln!(out, "# HELP {} {}", family.name, escape_help(family.help));
    let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
    for sample in &family.samples {
        out.push_str(family.name);
        if !sample.labels.is_empty() {
            out.push('{');
            for (i, (key, value)) in sample.labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{key}=\"{}\"", escape_label(value));
            }
            out.push('}');
        }
        let _ = write!(out, " {}", go_float(sample.value));
        if let Some(time) = sample.time {
            let _ = write!(out, " {}", time.unix_ms);
        }
        out.push('\n');
    }
}

/// A label value as the text format quotes it: backslash, double quote and line feed escaped.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            ch => out.push(ch),
        }
    }
    out
}

/// `# HELP` text: backslash and line feed escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `v` as Go's `strconv.FormatFloat(v, 'g', -1, 64)` writes it, which the Prometheus client
/// uses (module docs); infinities and NaN as the text format spells them.
pub fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // Rust's `{:e}` gives the shortest digits that read back as `v` (as Go's -1 precision
    // does): `1.139712e6`.
    let scientific = format!("{v:e}");
    let Some((mantissa, exponent)) = scientific.split_once('e') else {
        return format!("{v}");
    };
    let Ok(exponent) = exponent.parse::<i32>() else {
        return format!("{v}");
    };
    if (-4..6).contains(&exponent) {
        format!("{v}")
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{
        ContainerStats, CpuStats, MemoryStats, NodeStats, PodRef, PodStats,
    };

    #[test]
    fn floats_as_go_writes_them() {
        let cases: [(f64, &str); 14] = [
            (0.0, "0"),
            (1.0, "1"),
            (0.347960181, "0.347960181"),
            (152.87, "152.87"),
            (100000.0, "100000"),
            (999999.0, "999999"),
            (1e6, "1e+06"),
            (1_139_712.0, "1.139712e+06"),
            (1_764_180_000.0, "1.76418e+09"),
            (25_276_502_016.0, "2.5276502016e+10"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (-2.5, "-2.5"),
            (1e21, "1e+21"),
        ];
        for (v, want) in cases {
            assert_eq!(go_float(v), want, "{v}");
        }
        assert_eq!(go_float(f64::INFINITY), "+Inf");
        assert_eq!(go_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(go_float(f64::NAN), "NaN");
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("line\nbreak"), "line\\nbreak");
        assert_eq!(escape_label("plain-Ü"), "plain-Ü");
    }

    fn pod(name: &str, containers: &[(&str, u64, u64)], time: Time) -> PodStats {
        PodStats {
            pod_ref: PodRef {
                name: name.to_owned(),
                namespace: "default".to_owned(),
                uid: format!("uid-{name}"),
            },
            start_time: Some(time),
            containers: containers
                .iter()
                .map(|(c, cpu, ws)| ContainerStats {
                    name: (*c).to_owned(),
                    start_time: Time::from_unix_s(1_764_180_000),
                    cpu: Some(CpuStats {
                        time,
                        usage_nano_cores: None,
                        usage_core_nano_seconds: Some(*cpu),
                    }),
                    memory: Some(MemoryStats {
                        time,
                        available_bytes: None,
                        usage_bytes: None,
                        working_set_bytes: Some(*ws),
                        rss_bytes: None,
                        page_faults: None,
                        major_page_faults: None,
                    }),
                    rootfs: None,
                    logs: None,
                })
                .collect(),
            cpu: Some(CpuStats {
                time,
                usage_nano_cores: None,
                usage_core_nano_seconds: Some(containers.iter().map(|c| c.1).sum()),
            }),
            memory: Some(MemoryStats {
                time,
                available_bytes: None,
                usage_bytes: None,
                working_set_bytes: Some(containers.iter().map(|c| c.2).sum()),
                rss_bytes: None,
                page_faults: None,
                major_page_faults: None,
            }),
            network: None,
            ephemeral_storage: None,
        }
    }

    #[test]
    fn the_page_of_a_summary() {
        let time = Time {
            unix_ms: 1_764_180_001_234,
        };
        let summary = Summary {
            node: NodeStats {
                node_name: "edge-1".to_owned(),
                system_containers: Vec::new(),
                start_time: Some(Time::from_unix_s(1_764_000_000)),
                cpu: Some(CpuStats {
                    time,
                    usage_nano_cores: Some(5),
                    usage_core_nano_seconds: Some(152_870_000_000),
                }),
                memory: Some(MemoryStats {
                    time,
                    available_bytes: None,
                    usage_bytes: None,
                    working_set_bytes: Some(1_139_712_000),
                    rss_bytes: None,
                    page_faults: None,
                    major_page_faults: None,
                }),
                network: None,
                fs: None,
                runtime: None,
            },
            pods: vec![
                pod("web", &[("nginx", 347_960_181, 1_241_088)], time),
                pod("a\"b", &[("x", 1_000_000_000, 4096)], time),
                // A Wasm pod: nothing to show.
                PodStats {
                    containers: Vec::new(),
                    cpu: None,
                    memory: None,
                    ..pod("mapper", &[], time)
                },
            ],
        };
        let page = render(Some(&summary));
        let want = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="nginx",namespace="default",pod="web"} 0.347960181 1764180001234
container_cpu_usage_seconds_total{container="x",namespace="default",pod="a\"b"} 1 1764180001234
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="nginx",namespace="default",pod="web"} 1.241088e+06 1764180001234
container_memory_working_set_bytes{container="x",namespace="default",pod="a\"b"} 4096 1764180001234
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="nginx",namespace="default",pod="web"} 1.76418e+09
container_start_time_seconds{container="x",namespace="default",pod="a\"b"} 1.76418e+09
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 152.87 1764180001234
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.139712e+09 1764180001234
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="a\"b"} 1 1764180001234
pod_cpu_usage_seconds_total{namespace="default",pod="web"} 0.347960181 1764180001234
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="default",pod="a\"b"} 4096 1764180001234
pod_memory_working_set_bytes{namespace="default",pod="web"} 1.241088e+06 1764180001234
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
# HELP scrape_error [ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise
# TYPE scrape_error gauge
scrape_error 0
"#;
        assert_eq!(page, want);
    }

    #[test]
    fn a_failed_scrape_says_so_alone() {
        let page = render(None);
        assert_eq!(
            page,
            "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting \
             container metrics, 0 otherwise\n\
             # TYPE resource_scrape_error gauge\n\
             resource_scrape_error 1\n\
             # HELP scrape_error [ALPHA] (Deprecated since 1.29.0) 1 if there was an error \
             while getting container metrics, 0 otherwise\n\
             # TYPE scrape_error gauge\n\
             scrape_error 1\n"
        );
    }

    #[test]
    fn one_sample_per_label_set() {
        let old = Time::from_unix_s(100);
        let new = Time::from_unix_s(200);
        let mut a = pod("web", &[("nginx", 1_000_000_000, 1)], old);
        let mut b = pod("web", &[("nginx", 2_000_000_000, 2)], new);
        a.pod_ref.uid = "old".to_owned();
        b.pod_ref.uid = "new".to_owned();
        let summary = Summary {
            node: NodeStats {
                node_name: "n".to_owned(),
                system_containers: Vec::new(),
                start_time: None,
                cpu: None,
                memory: None,
                network: None,
                fs: None,
                runtime: None,
            },
            pods: vec![a, b],
        };
        let page = render(Some(&summary));
        let cpu: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("container_cpu_usage_seconds_total{"))
            .collect();
        assert_eq!(
            cpu,
            [
                "container_cpu_usage_seconds_total{container=\"nginx\",namespace=\"default\",pod=\"web\"} 2 200000"
            ]
        );
        assert!(!page.contains("node_cpu_usage_seconds_total"));
    }
}
