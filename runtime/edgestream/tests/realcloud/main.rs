//! The tunnel against the real thing: etcd, kube-apiserver and CloudCore v1.23.1 with
//! `cloudStream` on (`../shared/realcloud`, `CLOUDSTREAM=1`), started on free ports in a
//! temporary directory; a node certificate signed by CloudCore with the real join token; a
//! Node whose `InternalIP` the apiserver dials; the DNAT rule that takes that address and the
//! kubelet port CloudCore negotiated to CloudCore's stream server (as CloudCore's
//! iptablesManager does); and a test "kubelet" on a free port (`kubelet.rs`) behind our
//! [`EdgeStream`]. Then `kubectl logs`, `kubectl logs -f`, node-proxy metrics reads and
//! upgraded exec/attach connections go apiserver → CloudCore → tunnel → kubelet and back.
//!
//! One cloud serves every check, so this is a harness of its own (`harness = false`): checks
//! run in order, a failure is reported and the rest still run, and everything is cleaned up
//! at the end (tunnel, kubelet, the DNAT rule, the cloud, temporary directories), also when a
//! check panics. The last line is `edgestream realcloud: N passed, M failed`; `-- <filter>`
//! runs the checks whose name contains it. Needs root (iptables) and what
//! `../shared/realcloud/up.sh` needs; missing either fails, naming it.

mod apiserver;
mod kubelet;

use std::io::BufRead;
use std::net::IpAddr;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tokio_util::sync::CancellationToken;
use wedge_edgestream::{Credentials, EdgeStream, Stats, TunnelConfig};
use wedge_tests::realcloud::{Dnat, Kubectl, RealCloud, bin_dir, wait_for};
use wedge_tests::tally::Tally;

use apiserver::Api;
use kubelet::{Kubelet, LOG_TEXT, METRICS_AS_RELAYED, SUMMARY};

/// Everything a check gets. Fields drop in order: the tunnel stops first (`Drop`), then the
/// kubelet, the DNAT rule, the cloud, the node's directory, the runtime.
pub struct Bed {
    tunnel: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
    kubelet: Kubelet,
    dnat: Option<Dnat>,
    cloud: RealCloud,
    dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    api: Api,
    kubectl: Kubectl,
    stats: Arc<Stats>,
    node: String,
    node_ip: IpAddr,
    pod: String,
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some((stop, task)) = self.tunnel.take() {
            stop.cancel();
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(10), task).await });
        }
        self.kubelet.stop();
        self.dnat.take();
    }
}

/// One check.
type Check = fn(&mut Bed) -> Result<()>;

fn main() -> ExitCode {
    // RUST_LOG=wedge_edgestream=debug shows the tunnel's side of every check.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let started = Instant::now();
    let mut bed = match setup() {
        Ok(bed) => bed,
        Err(e) => {
            eprintln!("edgestream realcloud: the test bed did not come up: {e:#}");
            println!("edgestream realcloud: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "edgestream realcloud: cloud up, node {} ({}) tunnelled in {:.1?}",
        bed.node,
        bed.node_ip,
        started.elapsed()
    );
    let checks: Vec<(&str, Check)> = vec![
        (
            "the_session_carries_edgecores_headers",
            the_session_carries_edgecores_headers,
        ),
        (
            "a_server_outside_the_ca_is_refused",
            a_server_outside_the_ca_is_refused,
        ),
        ("kubectl_logs", kubectl_logs),
        (
            "kubectl_logs_passes_the_query",
            kubectl_logs_passes_the_query,
        ),
        (
            "kubectl_logs_follow_streams_until_interrupted",
            kubectl_logs_follow_streams_until_interrupted,
        ),
        ("node_proxy_stats_summary", node_proxy_stats_summary),
        (
            "node_proxy_metrics_lines_as_edgecore",
            node_proxy_metrics_lines_as_edgecore,
        ),
        ("connection_ids_past_127", connection_ids_past_127),
        ("exec_upgrade_pipes_both_ways", exec_upgrade_pipes_both_ways),
        (
            "attach_upgrade_ends_when_the_kubelet_ends",
            attach_upgrade_ends_when_the_kubelet_ends,
        ),
        (
            "the_tunnel_comes_back_after_a_cloudcore_restart",
            the_tunnel_comes_back_after_a_cloudcore_restart,
        ),
        (
            "an_unreachable_kubelet_ends_requests",
            an_unreachable_kubelet_ends_requests,
        ),
        ("counters", counters),
    ];
    let mut tally = Tally::new("edgestream realcloud");
    for (name, check) in checks {
        if !wanted(name) {
            continue;
        }
        let t = Instant::now();
        let outcome = check(&mut bed);
        let failed = outcome.is_err();
        tally.record(name, t.elapsed(), outcome);
        if failed {
            println!("{}", bed.cloud.logs_tail());
        }
    }
    drop(bed);
    tally.finish()
}

fn setup() -> Result<Bed> {
    ensure!(
        wedge_tests::is_root(),
        "the test adds an iptables DNAT rule (what CloudCore's iptablesManager does): run it as root"
    );
    let suffix: u32 = rand::random::<u32>() % 1_000_000;
    let node = format!("edgestream-{suffix}");
    // A TEST-NET address nobody routes: the apiserver's node proxy refuses loopback node
    // addresses ("address not allowed"), and a unique one keeps concurrent runs apart.
    let node_ip: IpAddr = format!(
        "198.18.{}.{}",
        rand::random::<u8>(),
        1 + rand::random::<u8>() % 254
    )
    .parse()?;
    // SAFETY: no other thread exists yet; up.sh reads these from the environment it inherits.
    unsafe {
        std::env::set_var("CLOUDSTREAM", "1");
        std::env::set_var("STREAM_IPS", node_ip.to_string());
    }
    let cloud = RealCloud::start()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dir = tempfile::Builder::new()
        .prefix("wedge-edgestream-")
        .tempdir()?;
    let paths = wedge_edgehub::bootstrap::CertPaths {
        ca: dir.path().join("rootCA.crt"),
        cert: dir.path().join("server.crt"),
        key: dir.path().join("server.key"),
    };
    let token = cloud.token()?;
    rt.block_on(wedge_edgehub::bootstrap::bootstrap(
        &format!("127.0.0.1:{}", cloud.ports.cloudhub_https),
        &token,
        &node,
        &paths,
    ))
    .context("node certificate from CloudCore with the join token")?;

    // The Node, as a node daemon registers it: its InternalIP is where the apiserver dials.
    let kubectl = cloud.kubectl_client();
    cloud.apply(&format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n  labels:\n    node-role.kubernetes.io/edge: \"\"\n"
    ))?;
    kubectl.run(
        &[
            "patch", "node", &node, "--subresource=status", "--type=merge", "-p",
            &format!(
                r#"{{"status":{{"addresses":[{{"type":"InternalIP","address":"{node_ip}"}},{{"type":"Hostname","address":"{node}"}}]}}}}"#
            ),
        ],
        None,
    )?;

    let kubelet = rt.block_on(Kubelet::start())?;
    let mut config = TunnelConfig::new(
        format!("127.0.0.1:{}", cloud.ports.tunnel),
        Credentials::Files {
            ca: paths.ca.clone(),
            cert: paths.cert.clone(),
            key: paths.key.clone(),
        },
        node.clone(),
    );
    config.node_ip = Some(node_ip);
    config.local_addr = kubelet.addr;
    let stream = EdgeStream::new(config)?;
    let stats = stream.stats();
    let stop = CancellationToken::new();
    let task = {
        let stop = stop.clone();
        rt.spawn(async move {
            if let Err(e) = stream.run(stop).await {
                eprintln!("edgestream: {e}");
            }
        })
    };
    let api = Api::new(cloud.state_dir(), cloud.ports.apiserver)?;
    let mut bed = Bed {
        tunnel: Some((stop, task)),
        kubelet,
        dnat: None,
        cloud,
        dir,
        rt,
        api,
        kubectl,
        stats,
        node,
        node_ip,
        pod: format!("edgestream-pod-{suffix}"),
    };

    // CloudCore writes the kubelet port it negotiated into the Node once the tunnel is there.
    let port = wait_for(
        "CloudCore records the tunnel's kubelet port on the Node",
        Duration::from_secs(60),
        || {
            let n = bed.kubectl.get(&["node", &bed.node])?;
            let port = n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
                .as_u64()
                .unwrap_or(0);
            Ok((port > 0).then_some(port))
        },
    )?;
    let record = bed
        .kubectl
        .get(&["-n", "kubeedge", "configmap", "tunnelport"])?;
    let record = record["metadata"]["annotations"]["tunnelportrecord.kubeedge.io"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ensure!(
        record.contains(&format!("{port}")),
        "the Node's kubelet port {port} is not in CloudCore's tunnel port record {record}"
    );
    let port = u16::try_from(port)?;
    bed.dnat = Some(Dnat::add(bed.node_ip, port, bed.cloud.ports.stream)?);
    bed.cloud.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n  namespace: default\nspec:\n  nodeName: {}\n  \
         containers:\n  - name: main\n    image: wedge-test/busybox:1\n",
        bed.pod, bed.node
    ))?;
    Ok(bed)
}

fn kubectl(bed: &Bed, args: &[&str]) -> Result<String> {
    let mut all = vec!["--request-timeout=30s"];
    all.extend_from_slice(args);
    bed.kubectl.run(&all, None)
}

fn the_session_carries_edgecores_headers(bed: &mut Bed) -> Result<()> {
    let log = bed.cloud.log("cloudcore");
    let want = format!(
        "get a new tunnel agent hostname {}, internalIP {}",
        bed.node, bed.node_ip
    );
    ensure!(log.contains(&want), "CloudCore's log lacks {want:?}");
    Ok(())
}

/// A second tunnel whose CA is the cluster's (not CloudHub's, which signed CloudCore's tunnel
/// certificate) must not open a session.
fn a_server_outside_the_ca_is_refused(bed: &mut Bed) -> Result<()> {
    let dir = bed.dir.path();
    let mut config = TunnelConfig::new(
        format!("127.0.0.1:{}", bed.cloud.ports.tunnel),
        Credentials::Pem {
            ca: std::fs::read(bed.cloud.state_dir().join("pki/ca.crt"))?,
            cert: std::fs::read(dir.join("server.crt"))?,
            key: std::fs::read(dir.join("server.key"))?,
        },
        format!("{}-impostor", bed.node),
    );
    config.local_addr = bed.kubelet.addr;
    let stream = EdgeStream::new(config)?;
    let stats = stream.stats();
    let stop = CancellationToken::new();
    let task = bed.rt.spawn(stream.run(stop.clone()));
    std::thread::sleep(Duration::from_secs(3));
    stop.cancel();
    bed.rt.block_on(task)??;
    ensure!(
        Stats::get(&stats.sessions) == 0 && Stats::get(&stats.dial_failures) >= 1,
        "sessions {}, dial failures {}",
        Stats::get(&stats.sessions),
        Stats::get(&stats.dial_failures)
    );
    Ok(())
}

fn kubectl_logs(bed: &mut Bed) -> Result<()> {
    let out = kubectl(bed, &["logs", &bed.pod])?;
    ensure!(
        out == LOG_TEXT,
        "kubectl logs printed {out:?}, the kubelet has {LOG_TEXT:?}"
    );
    let seen = bed
        .kubelet
        .record
        .requests(&format!("/containerLogs/default/{}/main", bed.pod));
    let req = seen.last().context("the kubelet saw no logs request")?;
    ensure!(req.method == "GET", "method {}", req.method);
    ensure!(
        req.header("accept-encoding") == Some("identity"),
        "Accept-Encoding {:?}: the body must not be compressed (CloudCore drops the response headers)",
        req.header("accept-encoding")
    );
    ensure!(
        req.header("host") == Some(bed.kubelet.addr.to_string().as_str()),
        "Host {:?}",
        req.header("host")
    );
    Ok(())
}

fn kubectl_logs_passes_the_query(bed: &mut Bed) -> Result<()> {
    kubectl(bed, &["logs", "--tail=3", "--timestamps", &bed.pod])?;
    let seen = bed
        .kubelet
        .record
        .requests(&format!("/containerLogs/default/{}/main?", bed.pod));
    ensure!(
        seen.iter()
            .any(|s| s.target.ends_with("?tailLines=3&timestamps=true")),
        "the kubelet saw {:?}",
        seen.iter().map(|s| &s.target).collect::<Vec<_>>()
    );
    Ok(())
}

fn kubectl_logs_follow_streams_until_interrupted(bed: &mut Bed) -> Result<()> {
    let closed_before = bed.kubelet.record.follows_closed.load(Ordering::SeqCst);
    let mut child = Command::new(bin_dir().join("kubectl"))
        .arg("--kubeconfig")
        .arg(bed.cloud.kubeconfig())
        .args(["logs", "-f", &bed.pod])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run kubectl")?;
    let stdout = child.stdout.take().context("kubectl stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let outcome = loop {
        let follows = lines
            .iter()
            .filter(|l: &&String| l.starts_with("follow line"))
            .count();
        if follows >= 3 {
            break Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => {
                break Err(anyhow::anyhow!(
                    "kubectl logs -f printed only {lines:?} in 30 s"
                ));
            }
        }
    };
    // Interrupt kubectl: the apiserver's request ends, CloudCore sends REMOVE_CONNECT, and the
    // tunnel must close the kubelet connection.
    let _ = child.kill();
    let _ = child.wait();
    outcome?;
    let expected: Vec<&str> = LOG_TEXT.lines().collect();
    ensure!(
        lines[..expected.len()] == expected[..],
        "kubectl logs -f began with {:?}, not the kubelet's {expected:?}",
        &lines[..expected.len().min(lines.len())]
    );
    ensure!(
        lines[expected.len()..3 + expected.len()]
            == ["follow line 1", "follow line 2", "follow line 3"],
        "streamed lines {lines:?}"
    );
    wait_for(
        "the kubelet's follow connection is closed after kubectl stopped",
        Duration::from_secs(15),
        || {
            Ok(
                (bed.kubelet.record.follows_closed.load(Ordering::SeqCst) > closed_before)
                    .then_some(()),
            )
        },
    )
}

fn node_proxy_stats_summary(bed: &mut Bed) -> Result<()> {
    let path = format!("/api/v1/nodes/{}/proxy/stats/summary", bed.node);
    let out = kubectl(bed, &["get", "--raw", &path])?;
    ensure!(
        out == SUMMARY,
        "kubectl get --raw {path} printed {out:?}, the kubelet has {SUMMARY:?}"
    );
    let seen = bed.kubelet.record.requests("/stats/summary");
    let req = seen.last().context("the kubelet saw no /stats/summary")?;
    ensure!(
        req.header("x-forwarded-uri") == Some(path.as_str()),
        "X-Forwarded-Uri {:?}",
        req.header("x-forwarded-uri")
    );
    Ok(())
}

fn node_proxy_metrics_lines_as_edgecore(bed: &mut Bed) -> Result<()> {
    let path = format!("/api/v1/nodes/{}/proxy/metrics", bed.node);
    let out = kubectl(bed, &["get", "--raw", &path])?;
    ensure!(
        out == METRICS_AS_RELAYED,
        "kubectl get --raw {path} printed {out:?}, edgecore would relay {METRICS_AS_RELAYED:?}"
    );
    Ok(())
}

/// CloudCore numbers connections from 1; from 128 on the id's varint is not UTF-8, though it
/// comes in a text frame. 140 reads, 10 at a time, take the ids well past it.
fn connection_ids_past_127(bed: &mut Bed) -> Result<()> {
    let api = bed.api.clone();
    let path = format!("/api/v1/nodes/{}/proxy/stats/summary", bed.node);
    let bad_before = Stats::get(&bed.stats.bad_messages);
    let results = bed.rt.block_on(async move {
        let sem = Arc::new(tokio::sync::Semaphore::new(10));
        let mut tasks = Vec::new();
        for _ in 0..140 {
            let (api, path, sem) = (api.clone(), path.clone(), sem.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = sem.acquire().await;
                api.get(&path).await
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.map_err(anyhow::Error::from).and_then(|r| r));
        }
        out
    });
    let mut wrong = Vec::new();
    for r in results {
        match r {
            Ok((200, body)) if body == SUMMARY => {}
            Ok((status, body)) => wrong.push(format!("{status}: {body:?}")),
            Err(e) => wrong.push(format!("{e:#}")),
        }
    }
    ensure!(
        wrong.is_empty(),
        "{} of 140 reads went wrong, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(3)]
    );
    ensure!(
        Stats::get(&bed.stats.bad_messages) == bad_before,
        "the tunnel counted bad messages"
    );
    ensure!(
        Stats::get(&bed.stats.sessions) == 1,
        "the tunnel was redialled ({} sessions)",
        Stats::get(&bed.stats.sessions)
    );
    Ok(())
}

fn exec_upgrade_pipes_both_ways(bed: &mut Bed) -> Result<()> {
    let closed_before = bed.kubelet.record.upgrades_closed.load(Ordering::SeqCst);
    let path = format!(
        "/api/v1/namespaces/default/pods/{}/exec?command=cat&container=main&stdin=true&stdout=true",
        bed.pod
    );
    let api = bed.api.clone();
    bed.rt.block_on(async move {
        let mut up = api.upgrade(&path).await?;
        ensure!(
            up.head.starts_with("HTTP/1.1 101"),
            "the apiserver answered {:?}",
            up.head
        );
        ensure!(
            up.head.contains("Spdy/3.1") || up.head.contains("SPDY/3.1"),
            "no SPDY upgrade in {:?}",
            up.head
        );
        // Binary bytes too: the tunnel's text frames carry anything.
        use tokio::io::AsyncWriteExt;
        up.stream
            .write_all(b"hello through the tunnel \x00\xff\x80\n")
            .await?;
        let want: &[u8] = b"HELLO THROUGH THE TUNNEL \x00\xff\x80\n";
        let got = up.read_until(want).await?;
        ensure!(got == want, "echo {:?}", String::from_utf8_lossy(&got));
        up.stream.write_all(b"second\n").await?;
        up.read_until(b"SECOND\n").await?;
        // The client goes away: CloudCore sends REMOVE_CONNECT, the tunnel closes the kubelet's
        // connection.
        drop(up);
        Ok(())
    })?;
    wait_for(
        "the kubelet's exec connection is closed after the client left",
        Duration::from_secs(15),
        || {
            Ok(
                (bed.kubelet.record.upgrades_closed.load(Ordering::SeqCst) > closed_before)
                    .then_some(()),
            )
        },
    )?;
    let seen = bed
        .kubelet
        .record
        .requests(&format!("/exec/default/{}/main?", bed.pod));
    let req = seen.last().context("the kubelet saw no exec request")?;
    ensure!(req.method == "POST", "method {}", req.method);
    ensure!(
        req.header("upgrade") == Some("SPDY/3.1"),
        "Upgrade {:?}",
        req.header("upgrade")
    );
    ensure!(
        req.target.contains("command=cat") && req.target.contains("input=1"),
        "target {}",
        req.target
    );
    Ok(())
}

fn attach_upgrade_ends_when_the_kubelet_ends(bed: &mut Bed) -> Result<()> {
    let path = format!(
        "/api/v1/namespaces/default/pods/{}/attach?container=main&stdin=true&stdout=true",
        bed.pod
    );
    let api = bed.api.clone();
    bed.rt.block_on(async move {
        let mut up = api.upgrade(&path).await?;
        ensure!(
            up.head.starts_with("HTTP/1.1 101"),
            "the apiserver answered {:?}",
            up.head
        );
        use tokio::io::AsyncWriteExt;
        up.stream.write_all(b"attached\n").await?;
        up.read_until(b"ATTACHED\n").await?;
        // The kubelet ends the stream: the tunnel sends REMOVE_CONNECT. CloudCore notices it
        // only between two reads from the apiserver's connection (its loop blocks in the
        // read), so the client's connection ends at the client's next write; with kubectl the
        // SPDY streams' own ends close it first.
        up.stream.write_all(b"bye\n").await?;
        up.read_until(b"BYE\n").await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = up.stream.write_all(b"anyone?\n").await;
        let rest = up.read_to_end().await?;
        ensure!(
            rest.is_empty(),
            "after the kubelet's end came {:?}",
            String::from_utf8_lossy(&rest)
        );
        Ok(())
    })?;
    ensure!(
        !bed.kubelet
            .record
            .requests(&format!("/attach/default/{}/main?", bed.pod))
            .is_empty(),
        "the kubelet saw no attach request"
    );
    Ok(())
}

fn the_tunnel_comes_back_after_a_cloudcore_restart(bed: &mut Bed) -> Result<()> {
    let sessions = Stats::get(&bed.stats.sessions);
    bed.cloud.stop_cloudcore()?;
    wait_for(
        "the tunnel notices CloudCore is gone",
        Duration::from_secs(20),
        || Ok((Stats::get(&bed.stats.connected) == 0).then_some(())),
    )?;
    bed.cloud.up()?;
    wait_for("kubectl logs works again", Duration::from_secs(120), || {
        let out = kubectl(bed, &["logs", &bed.pod])?;
        Ok((out == LOG_TEXT).then_some(()))
    })?;
    ensure!(
        Stats::get(&bed.stats.sessions) > sessions,
        "no new session was counted"
    );
    Ok(())
}

fn an_unreachable_kubelet_ends_requests(bed: &mut Bed) -> Result<()> {
    bed.kubelet.stop();
    // Logs: CloudCore has answered 200 already; the request must end, not hang.
    let t = Instant::now();
    let out = kubectl(bed, &["logs", &bed.pod])?;
    ensure!(
        out.is_empty(),
        "kubectl logs printed {out:?} with no kubelet"
    );
    ensure!(
        t.elapsed() < Duration::from_secs(10),
        "kubectl logs took {:?}",
        t.elapsed()
    );
    // Exec: the tunnel answers 502 in the kubelet's place, which the apiserver reports.
    let path = format!(
        "/api/v1/namespaces/default/pods/{}/exec?command=cat&container=main&stdin=true&stdout=true",
        bed.pod
    );
    let api = bed.api.clone();
    let (head, body) = bed.rt.block_on(async move {
        let mut up = api.upgrade(&path).await?;
        let body = up.body().await?;
        Ok::<_, anyhow::Error>((up.head, body))
    })?;
    ensure!(
        head.starts_with("HTTP/1.1 502") && body.contains("not reachable"),
        "the apiserver did not pass on the tunnel's 502: {head:?} {body:?}"
    );
    ensure!(
        Stats::get(&bed.stats.local_failures[0]) >= 1
            && Stats::get(&bed.stats.local_failures[1]) >= 1,
        "local failures not counted"
    );
    Ok(())
}

fn counters(bed: &mut Bed) -> Result<()> {
    use wedge_core::metrics::{MetricsSource, PromWriter};
    let mut w = PromWriter::new();
    bed.stats.write_metrics(&mut w);
    let page = w.finish();
    for line in [
        "wedge_edgestream_connected 1",
        "wedge_edgestream_refused_total{reason=\"bad_message\"} 0",
    ] {
        ensure!(page.contains(line), "/metrics lacks {line:?}:\n{page}");
    }
    let opened = |kind: usize| Stats::get(&bed.stats.opened[kind]);
    ensure!(
        opened(0) >= 4 && opened(1) >= 2 && opened(2) >= 140 && opened(3) >= 1,
        "connections opened by kind: logs {}, exec {}, metrics {}, attach {}",
        opened(0),
        opened(1),
        opened(2),
        opened(3)
    );
    if Stats::get(&bed.stats.messages_in) == 0 || Stats::get(&bed.stats.bytes_out) == 0 {
        bail!("no traffic counted");
    }
    Ok(())
}
