//! MetaServer load generator: LIST latency of many pods and ConfigMaps, watch latency from a
//! cloud change to an edge watcher, and memory growth with many open watches — for each
//! MetaServer named (Wedge's and edgecore's side by side, on one cloud).
//!
//! ```sh
//! metaserver-bench --kubeconfig /tmp/realcloud/admin.kubeconfig \
//!     --target wedge=127.0.0.1:10550@<wedge pid> --target edgecore=127.0.0.1:10551@<edgecore pid>
//! ```
//! It creates `--objects` pods (unschedulable) and ConfigMaps in namespace `ms-bench` (skip with
//! `--skip-setup`), opens a watch on each so the cloud sends the node both kinds, then measures.
//! `--only list` measures LISTs alone (e.g. with CloudCore stopped, answered from the nodes).

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use serde_json::Value;
use wedge_tests::kube_http::{self, Watch};

const NS: &str = "ms-bench";

#[derive(Parser)]
struct Args {
    /// The cloud's admin kubeconfig.
    #[arg(long)]
    kubeconfig: String,
    /// kubectl.
    #[arg(long, default_value = "target/realcloud-bin/kubectl")]
    kubectl: String,
    /// `name=host:port[@pid]`: a MetaServer (and its process, for memory).
    #[arg(long = "target", required = true)]
    targets: Vec<String>,
    /// Pods and ConfigMaps created.
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// LISTs per resource and target.
    #[arg(long, default_value_t = 50)]
    rounds: usize,
    /// Cloud edits timed to the watchers.
    #[arg(long, default_value_t = 20)]
    edits: usize,
    /// Watches opened for the memory figure.
    #[arg(long, default_value_t = 100)]
    watches: usize,
    /// Use the objects already there.
    #[arg(long)]
    skip_setup: bool,
    /// `list`: only LIST latency; `flood`: only `--flood` watch requests at once.
    #[arg(long)]
    only: Option<String>,
    /// Watch requests opened at once for the flood figure (each on its own connection).
    #[arg(long, default_value_t = 10_000)]
    flood: usize,
}

struct Target {
    name: String,
    addr: SocketAddr,
    pid: Option<u32>,
}

fn parse_target(text: &str) -> Result<Target> {
    let (name, rest) = text.split_once('=').context("want name=host:port[@pid]")?;
    let (addr, pid) = match rest.split_once('@') {
        Some((a, p)) => (a, Some(p.parse()?)),
        None => (rest, None),
    };
    Ok(Target {
        name: name.to_owned(),
        addr: addr.parse()?,
        pid,
    })
}

fn kubectl(args: &Args, argv: &[&str], input: Option<&str>) -> Result<String> {
    let mut child = Command::new(&args.kubectl)
        .arg("--kubeconfig")
        .arg(&args.kubeconfig)
        .args(argv)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        use std::io::Write;
        stdin.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "kubectl {}: {}",
        argv.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn setup(args: &Args) -> Result<()> {
    let _ = kubectl(args, &["create", "namespace", NS], None);
    for start in (0..args.objects).step_by(250) {
        let mut yaml = String::new();
        for i in start..(start + 250).min(args.objects) {
            yaml.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  namespace: {NS}\n  \
                 labels:\n    bench: \"1\"\ndata:\n  v: \"0\"\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  \
                 name: pod-{i}\n  namespace: {NS}\n  labels:\n    bench: \"1\"\nspec:\n  nodeSelector:\n    \
                 bench: none\n  containers:\n  - name: c\n    image: wedge-test/busybox:1\n"
            ));
        }
        kubectl(args, &["apply", "--validate=false", "-f", "-"], Some(&yaml))?;
    }
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn items(body: &[u8]) -> Result<(usize, String)> {
    let list: Value = serde_json::from_slice(body).context("not a JSON list")?;
    Ok((
        list["items"].as_array().map_or(0, Vec::len),
        list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
    ))
}

fn list_latency(t: &Target, resource: &str, rounds: usize) -> Result<(Vec<Duration>, usize)> {
    let path = format!("/api/v1/namespaces/{NS}/{resource}");
    let mut times = Vec::with_capacity(rounds);
    let mut count = 0;
    for _ in 0..rounds {
        let at = Instant::now();
        let (status, body) = kube_http::get(t.addr, &path)?;
        times.push(at.elapsed());
        ensure!(status == 200, "{} LIST {resource}: {status}", t.name);
        count = items(&body)?.0;
    }
    times.sort();
    Ok((times, count))
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

fn watch_path(resource: &str, rv: &str, selector: &str) -> String {
    format!(
        "/api/v1/namespaces/{NS}/{resource}?watch=true&resourceVersion={rv}&labelSelector={selector}&timeoutSeconds=600"
    )
}

fn main() -> Result<()> {
    let args = Args::parse();
    let targets: Vec<Target> = args
        .targets
        .iter()
        .map(|t| parse_target(t))
        .collect::<Result<_>>()?;
    if !args.skip_setup {
        let at = Instant::now();
        setup(&args)?;
        println!(
            "created {0} pods and {0} ConfigMaps in {1:.1?}",
            args.objects,
            at.elapsed()
        );
    }
    if args.only.as_deref() == Some("flood") {
        return flood(&targets, args.flood);
    }
    // A watch per kind on each node: the cloud then sends the node both kinds.
    let mut warm = Vec::new();
    if args.only.is_none() {
        for t in &targets {
            for resource in ["pods", "configmaps"] {
                warm.push(Watch::open(t.addr, &watch_path(resource, "", ""))?);
            }
        }
        std::thread::sleep(Duration::from_secs(15));
    }

    println!(
        "\n| LIST of {} (sequential, {} rounds) | items | p50 ms | p99 ms |",
        args.objects, args.rounds
    );
    println!("|---|---|---|---|");
    for t in &targets {
        for resource in ["pods", "configmaps"] {
            let (times, count) = list_latency(t, resource, args.rounds)?;
            println!(
                "| {} {resource} | {count} | {} | {} |",
                t.name,
                ms(percentile(&times, 0.5)),
                ms(percentile(&times, 0.99))
            );
        }
    }
    if args.only.as_deref() == Some("list") {
        return Ok(());
    }

    // Watch latency: a cloud edit of cm-0 until each watcher has it.
    let mut watchers = Vec::new();
    for t in &targets {
        let (_, body) = kube_http::get(t.addr, &format!("/api/v1/namespaces/{NS}/configmaps"))?;
        let (_, rv) = items(&body)?;
        watchers.push(Watch::open(t.addr, &watch_path("configmaps", &rv, ""))?);
    }
    std::thread::sleep(Duration::from_secs(3));
    let mut latencies: Vec<Vec<Duration>> = vec![Vec::new(); targets.len()];
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    for i in 0..args.edits {
        let value = format!("{stamp}-{i}");
        let patch = format!("{{\"data\":{{\"v\":\"{value}\"}}}}");
        let at = Instant::now();
        kubectl(
            &args,
            &[
                "-n",
                NS,
                "patch",
                "configmap",
                "cm-0",
                "--type=merge",
                "-p",
                &patch,
            ],
            None,
        )?;
        let needle = format!("\"v\":\"{value}\"");
        for (w, lat) in watchers.iter().zip(latencies.iter_mut()) {
            match w.until(Duration::from_secs(30), |l| l.contains(&needle)) {
                Ok((seen, _)) => lat.push(seen.duration_since(at)),
                Err(e) => bail!("a watcher missed edit {i}: {e}"),
            }
        }
    }
    println!(
        "\n| watch latency, cloud edit (kubectl patch start) → edge watcher, {} edits | p50 ms | p99 ms | max ms |",
        args.edits
    );
    println!("|---|---|---|---|");
    for (t, lat) in targets.iter().zip(latencies.iter_mut()) {
        lat.sort();
        println!(
            "| {} | {} | {} | {} |",
            t.name,
            ms(percentile(lat, 0.5)),
            ms(percentile(lat, 0.99)),
            ms(*lat.last().unwrap_or(&Duration::ZERO))
        );
    }
    for w in watchers {
        w.close();
    }

    // Memory with many open watches (informer-like: each from a LIST's version).
    println!(
        "\n| {} open watches (half pods, half ConfigMaps, distinct selectors) | RSS before MiB | after MiB | growth MiB | events delivered |",
        args.watches
    );
    println!("|---|---|---|---|---|");
    for t in &targets {
        let Some(pid) = t.pid else { continue };
        let before = rss_kib(pid)?;
        let mut open = Vec::new();
        for i in 0..args.watches {
            let resource = if i % 2 == 0 { "pods" } else { "configmaps" };
            let (_, body) = kube_http::get(
                t.addr,
                &format!("/api/v1/namespaces/{NS}/{resource}?labelSelector=bench%3D1"),
            )?;
            let (_, rv) = items(&body)?;
            let w = Watch::open(t.addr, &watch_path(resource, &rv, &format!("w{i}%21%3Dx")))?;
            ensure!(w.status == 200, "{} watch {i}: {}", t.name, w.status);
            open.push(w);
        }
        std::thread::sleep(Duration::from_secs(15));
        let after = rss_kib(pid)?;
        let delivered: usize = open.iter().map(|w| w.lines.try_iter().count()).sum();
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {delivered} |",
            t.name,
            before as f64 / 1024.0,
            after as f64 / 1024.0,
            (after as f64 - before as f64) / 1024.0
        );
        for w in open {
            w.close();
        }
        std::thread::sleep(Duration::from_secs(5));
    }
    drop(warm);
    Ok(())
}

/// `n` watch requests at once on each target: how many are served and refused, the memory
/// while they are open and after, and a LIST's time meanwhile.
fn flood(targets: &[Target], n: usize) -> Result<()> {
    use std::io::{BufRead, BufReader, Write};
    println!(
        "\n| {n} watch requests at once | 200 | 429 | other / failed | LIST during, ms | RSS before / during / after MiB |"
    );
    println!("|---|---|---|---|---|---|");
    for t in targets {
        let before = t.pid.map(rss_kib).transpose()?.unwrap_or(0);
        let mut conns = Vec::with_capacity(n);
        let mut failed = 0;
        for _ in 0..n {
            match std::net::TcpStream::connect_timeout(&t.addr, Duration::from_secs(5)) {
                Ok(mut c) => {
                    let req = format!(
                        "GET /api/v1/namespaces/{NS}/configmaps?watch=true&timeoutSeconds=600 HTTP/1.1\r\nHost: {}\r\n\r\n",
                        t.addr
                    );
                    if c.write_all(req.as_bytes()).is_ok() {
                        conns.push(c);
                    } else {
                        failed += 1;
                    }
                }
                Err(_) => failed += 1,
            }
        }
        let (mut ok, mut refused, mut other) = (0, 0, 0);
        for c in &conns {
            let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
            let mut line = String::new();
            let status = BufReader::new(c).read_line(&mut line).ok().and_then(|_| {
                line.split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse::<u16>().ok())
            });
            match status {
                Some(200) => ok += 1,
                Some(429) => refused += 1,
                _ => other += 1,
            }
        }
        let at = Instant::now();
        let listed = kube_http::get(t.addr, &format!("/api/v1/namespaces/{NS}/configmaps"))
            .map(|(s, _)| s)
            .unwrap_or(0);
        let list_ms = ms(at.elapsed());
        let during = t.pid.map(rss_kib).transpose()?.unwrap_or(0);
        drop(conns);
        std::thread::sleep(Duration::from_secs(10));
        let after = t.pid.map(rss_kib).transpose()?.unwrap_or(0);
        println!(
            "| {} | {ok} | {refused} | {other} / {failed} | {list_ms} (status {listed}) | {:.1} / {:.1} / {:.1} |",
            t.name,
            before as f64 / 1024.0,
            during as f64 / 1024.0,
            after as f64 / 1024.0
        );
    }
    Ok(())
}
