//! `kubectl logs`, `exec`, `attach` and the node's stats on Wedge nodes (and the logs of a Wasm
//! pod), through the real KubeEdge cloud of `../shared/realcloud` with `cloudStream` on:
//! kubectl → kube-apiserver → (DNAT, as CloudCore's iptablesManager does) CloudCore's stream
//! server → the tunnel → the node's EdgeStream → edged's kubelet port → Docker, containerd or
//! the Wasm host.
//!
//! Two Wedge nodes join one cloud, joined as an operator joins them (`wedge join`) with
//! `modules.edgeStream.enable`, a `nodeIP` and their own `readOnlyPort`: one runs its pods on
//! Docker, one on the private CRI containerd `.ci/setup` starts. Every check runs on both.
//!
//! `cargo test -p wedge-tests --test realcloud_stream [-- NAME]` runs the checks whose name
//! contains NAME; `-- --bench N` also times N `kubectl logs` first bytes and exec round
//! trips per node (printed, never judged). Needs root (iptables) and what `.ci/setup`
//! installs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::process::{Child, Command, ExitCode, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use wedge_tests::realcloud::{Dnat, Kubectl, RealCloud, RealNode, RealNodeOptions, wait_for};
use wedge_tests::tally::Tally;

/// The CRI socket `.ci/setup` starts.
const CRI_ENDPOINT: &str = "unix:///run/wedge-ci-containerd/containerd.sock";

/// One Wedge node of the bed.
struct StreamNode {
    node: RealNode,
    runtime: &'static str,
    _dnat: Dnat,
}

struct Bed {
    cloud: RealCloud,
    kubectl: Kubectl,
    nodes: Vec<StreamNode>,
}

type Check = fn(&Bed, &StreamNode) -> Result<()>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args
        .iter()
        .position(|a| a == "--bench")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse::<usize>().ok());
    let filter = args
        .iter()
        .enumerate()
        .find(|(i, a)| {
            !a.starts_with('-') && (*i == 0 || args.get(i - 1).is_none_or(|p| p != "--bench"))
        })
        .map(|(_, a)| a.clone());
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let started = Instant::now();
    let bed = match setup() {
        Ok(bed) => bed,
        Err(e) => {
            eprintln!("realcloud_stream: the test bed did not come up: {e:#}");
            println!("realcloud_stream: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "realcloud_stream: cloud up, {} nodes joined with their tunnels in {:.1?}",
        bed.nodes.len(),
        started.elapsed()
    );
    let checks: [(&str, Check); 10] = [
        ("logs_with_kubectls_options", logs_with_kubectls_options),
        (
            "logs_follow_streams_new_lines",
            logs_follow_streams_new_lines,
        ),
        (
            "logs_previous_shows_the_last_run",
            logs_previous_shows_the_last_run,
        ),
        (
            "exec_runs_a_command_with_its_exit_code",
            exec_runs_a_command_with_its_exit_code,
        ),
        (
            "exec_it_runs_an_interactive_shell_on_a_tty",
            exec_it_runs_an_interactive_shell_on_a_tty,
        ),
        (
            "attach_streams_the_main_process",
            attach_streams_the_main_process,
        ),
        (
            "stats_summary_through_the_node_proxy",
            stats_summary_through_the_node_proxy,
        ),
        (
            "resource_metrics_through_the_node_proxy",
            resource_metrics_through_the_node_proxy,
        ),
        (
            "wasm_pod_logs_are_the_modules_log",
            wasm_pod_logs_are_the_modules_log,
        ),
        (
            "logs_of_a_terminating_pod_are_served",
            logs_of_a_terminating_pod_are_served,
        ),
    ];
    let mut tally = Tally::new("realcloud_stream");
    for node in &bed.nodes {
        for (name, check) in checks {
            if !wanted(name) {
                continue;
            }
            let at = Instant::now();
            let outcome = check(&bed, node);
            tally.record(&format!("{name} [{}]", node.runtime), at.elapsed(), outcome);
        }
        if let Some(rounds) = bench
            && let Err(e) = timings(&bed, node, rounds)
        {
            println!("bench [{}]: {e:#}", node.runtime);
        }
    }
    if tally.failed() {
        for node in &bed.nodes {
            println!("--- wedge log of {} (last 60 lines) ---", node.node.name);
            let log = node.node.daemon.log();
            let lines: Vec<&str> = log.lines().rev().take(60).collect();
            for line in lines.iter().rev() {
                println!("{line}");
            }
        }
        println!("{}", bed.cloud.logs_tail());
    }
    let Bed { cloud, nodes, .. } = bed;
    for node in &nodes {
        let _ = cloud.kubectl(&[
            "delete",
            "pod",
            &talker(node),
            "--wait=true",
            "--timeout=60s",
        ]);
    }
    for mut node in nodes {
        if let Err(e) = node.node.stop() {
            println!(
                "realcloud_stream: cleaning up node {} failed: {e:#}",
                node.node.name
            );
        }
    }
    tally.finish()
}

/// The pod each node runs: `main` prints a numbered line every 0.2 s and echoes its stdin;
/// `crasher` prints its start and exits after 2 s, so it has a previous run.
fn talker(node: &StreamNode) -> String {
    format!("talker-{}", node.runtime)
}

fn setup() -> Result<Bed> {
    ensure!(
        wedge_tests::is_root(),
        "the test adds iptables DNAT rules (what CloudCore's iptablesManager does): run it as root"
    );
    // TEST-NET addresses nobody routes: the apiserver's node proxy (stats) refuses loopback
    // node addresses, and random ones keep concurrent runs apart.
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    let net = 1 + seed % 250;
    let ips: Vec<IpAddr> = (1..=2)
        .map(|host| format!("198.18.{net}.{host}").parse())
        .collect::<Result<_, _>>()?;
    let joined: Vec<String> = ips.iter().map(ToString::to_string).collect();
    // SAFETY: no other thread exists yet; up.sh reads these from the environment it inherits.
    unsafe {
        std::env::set_var("CLOUDSTREAM", "1");
        std::env::set_var("STREAM_IPS", joined.join(" "));
    }
    let cloud = RealCloud::start()?;
    let suffix = seed % 100_000;
    let mut nodes = Vec::new();
    for (ip, runtime) in ips.into_iter().zip(["docker", "containerd"]) {
        let mut options = RealNodeOptions::new(&format!("wedge-stream-{runtime}-{suffix}"));
        options.log_filter = "info,wedge_edged::server=debug,wedge_edgestream=debug".into();
        options.sets = vec![
            "modules.edgeStream.enable=true".into(),
            format!("modules.edgeStream.server=127.0.0.1:{}", cloud.ports.tunnel),
            format!("modules.edged.nodeIP={ip}"),
            format!(
                "modules.edged.tailoredKubeletConfig.readOnlyPort={}",
                wedge_tests::free_port()
            ),
            // The Wasm pod below brings its module in a ConfigMap.
            "wedge.edged.wasmPodModuleNamespaces=[default]".into(),
        ];
        if runtime == "containerd" {
            ensure!(
                std::path::Path::new(CRI_ENDPOINT.trim_start_matches("unix://")).exists(),
                "no CRI containerd at {CRI_ENDPOINT}: run `bash .ci/setup`"
            );
            options.sets.push(format!(
                "modules.edged.tailoredKubeletConfig.containerRuntimeEndpoint={CRI_ENDPOINT}"
            ));
        }
        let node = RealNode::join(&cloud, options)?;
        // CloudCore writes the kubelet port it negotiated into the Node once the tunnel is
        // up and the Node exists; the node's own status updates must leave it there. The
        // tunnel opens once the Node exists, so this takes a moment: CloudCore looks for a
        // Node it cannot find again only after 20 s (then gives up), which a tunnel opened
        // before registration would wait out.
        let port = wait_for(
            "CloudCore records the tunnel's kubelet port on the Node",
            Duration::from_secs(15),
            || {
                let record = cloud.get(&["-n", "kubeedge", "configmap", "tunnelport"])?;
                let record = record["metadata"]["annotations"]["tunnelportrecord.kubeedge.io"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let n = cloud.get(&["node", &node.name])?;
                let port = n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
                    .as_u64()
                    .unwrap_or(0);
                Ok((port > 0 && record.contains(&port.to_string())).then_some(port))
            },
        )?;
        let dnat = Dnat::add(ip, u16::try_from(port)?, cloud.ports.stream)?;
        let stream_node = StreamNode {
            node,
            runtime,
            _dnat: dnat,
        };
        cloud.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: default\nspec:\n  \
             nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  containers:\n  \
             - name: main\n    image: wedge-test/busybox:1\n    imagePullPolicy: Never\n    \
             command: [\"sh\", \"-c\", \"i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done\"]\n  \
             - name: crasher\n    image: wedge-test/busybox:1\n    imagePullPolicy: Never\n    \
             command: [\"sh\", \"-c\", \"echo run $(cat /proc/sys/kernel/random/uuid); sleep 2; exit 1\"]\n",
            pod = talker(&stream_node),
            node = stream_node.node.name,
        ))?;
        wait_for("the talker pod runs", Duration::from_secs(120), || {
            let pod = cloud.get(&["pod", &talker(&stream_node)])?;
            Ok((pod["status"]["phase"] == "Running").then_some(()))
        })?;
        nodes.push(stream_node);
    }
    Ok(Bed {
        kubectl: cloud.kubectl_client(),
        cloud,
        nodes,
    })
}

/// The test's kubectl arguments: every call bounded.
fn bounded<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--request-timeout=60s"];
    all.extend_from_slice(args);
    all
}

/// kubectl with the cloud's admin kubeconfig; its whole output whatever its status.
fn kubectl(bed: &Bed, args: &[&str], input: Option<&[u8]>) -> Result<Output> {
    bed.kubectl.output(&bounded(args), input)
}

fn kubectl_command(bed: &Bed, args: &[&str]) -> Command {
    bed.kubectl.command(&bounded(args))
}

/// kubectl's stdout, which must have succeeded.
fn kubectl_ok(bed: &Bed, args: &[&str]) -> Result<String> {
    bed.kubectl.run(&bounded(args), None)
}

/// Reads `child`'s stdout lines on a thread until `enough` says the lines so far are enough
/// or `deadline` passes, then kills the child. The deadline is generous (a loaded CI machine
/// may take seconds to set up a stream); what is asserted is what arrived, not how fast.
fn lines_until(
    mut child: Child,
    deadline: Duration,
    enough: impl Fn(&[(Duration, String)]) -> bool,
) -> Result<Vec<(Duration, String)>> {
    let stdout = child.stdout.take().context("no stdout")?;
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send((started.elapsed(), line)).is_err() {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    while let Some(left) = deadline.checked_sub(started.elapsed()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                lines.push(line);
                if enough(&lines) {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout | mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    let mut err = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut err);
    }
    let _ = child.wait();
    if lines.is_empty() && !err.trim().is_empty() {
        bail!("no output in {deadline:?}; kubectl said: {}", err.trim());
    }
    Ok(lines)
}

/// At least `n` `line N` lines, each one more than the one before.
fn consecutive(lines: &[(Duration, String)], n: usize) -> bool {
    let numbers: Vec<u64> = lines.iter().filter_map(|(_, l)| line_number(l)).collect();
    numbers.len() >= n && numbers.windows(2).all(|w| w[1] == w[0] + 1)
}

/// A kubectl that streams (`logs -f`, `attach`), its output piped for [`lines_until`].
fn streaming(bed: &Bed, args: &[&str]) -> Result<Child> {
    Ok(kubectl_command(bed, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?)
}

/// The number in a `line N` output line.
fn line_number(line: &str) -> Option<u64> {
    line.trim().strip_prefix("line ")?.trim().parse().ok()
}

/// `kubectl logs --tail=1 --timestamps` of `container`: the whole answer, and its time and
/// text split at the first space.
fn last_line_stamped(bed: &Bed, pod: &str, container: &str) -> Result<(String, String, String)> {
    let stamped = kubectl_ok(
        bed,
        &["logs", pod, "-c", container, "--tail=1", "--timestamps"],
    )?;
    let (time, text) = stamped
        .trim_end()
        .split_once(' ')
        .with_context(|| format!("--timestamps gave {stamped:?}"))?;
    let (time, text) = (time.to_owned(), text.to_owned());
    Ok((stamped, time, text))
}

fn logs_with_kubectls_options(bed: &Bed, node: &StreamNode) -> Result<()> {
    let pod = talker(node);
    let all = kubectl_ok(bed, &["logs", &pod, "-c", "main"])?;
    ensure!(all.starts_with("line 1\n"), "kubectl logs: {all:?}");
    let tail = kubectl_ok(bed, &["logs", &pod, "-c", "main", "--tail=3"])?;
    let numbers: Vec<u64> = tail.lines().filter_map(line_number).collect();
    ensure!(
        numbers.len() == 3 && numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "--tail=3 gave {tail:?}"
    );
    let (stamped, time, text) = last_line_stamped(bed, &pod, "main")?;
    ensure!(
        time.len() >= 20 && time.starts_with("20") && time.ends_with('Z'),
        "--timestamps: {time:?} is not an RFC 3339 time"
    );
    ensure!(text.starts_with("line "), "--timestamps: {stamped:?}");
    let limited = kubectl_ok(bed, &["logs", &pod, "-c", "main", "--limit-bytes=4"])?;
    ensure!(limited == "line", "--limit-bytes=4 gave {limited:?}");
    std::thread::sleep(Duration::from_millis(1500));
    let recent = kubectl_ok(bed, &["logs", &pod, "-c", "main", "--since=1s"])?;
    let recent: Vec<u64> = recent.lines().filter_map(line_number).collect();
    let all_now = kubectl_ok(bed, &["logs", &pod, "-c", "main"])?;
    let total = all_now.lines().count();
    // Docker's `since` is whole seconds (dockershim sent it so too): up to 2 s of lines, at 5
    // lines a second.
    ensure!(
        !recent.is_empty() && recent.len() < total && recent.len() <= 12,
        "--since=1s gave {} of {total} lines",
        recent.len()
    );
    let missing = kubectl(bed, &["logs", &pod, "-c", "nosuch"], None)?;
    ensure!(
        !missing.status.success(),
        "logs of a container the pod does not have succeeded"
    );
    Ok(())
}

fn logs_follow_streams_new_lines(bed: &Bed, node: &StreamNode) -> Result<()> {
    let pod = talker(node);
    let child = streaming(bed, &["logs", "-f", &pod, "-c", "main", "--tail=1"])?;
    let lines = lines_until(child, Duration::from_secs(20), |l| consecutive(l, 8))?;
    ensure!(
        consecutive(&lines, 8),
        "kubectl logs -f gave {lines:?} in 20 s (a line is written every 0.2 s)"
    );
    Ok(())
}

fn logs_previous_shows_the_last_run(bed: &Bed, node: &StreamNode) -> Result<()> {
    let pod = talker(node);
    wait_for(
        "the crasher container restarted",
        Duration::from_secs(60),
        || {
            let p = bed.cloud.get(&["pod", &pod])?;
            let restarted = p["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["name"] == "crasher" && c["restartCount"].as_u64().unwrap_or(0) >= 1);
            Ok(restarted.then_some(()))
        },
    )?;
    // kubelet's rule: `--previous` is the container's last terminated instance. While the
    // crasher runs, that is the one before it, and differs from `kubectl logs`; while it waits
    // in its back-off, the newest instance is the last terminated one, and both show it.
    wait_for(
        "--previous shows the last terminated run",
        Duration::from_secs(60),
        || {
            let p = bed.cloud.get(&["pod", &pod])?;
            let state = p["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["name"] == "crasher")
                .map(|c| c["state"].clone())
                .unwrap_or_default();
            let previous = kubectl_ok(bed, &["logs", &pod, "-c", "crasher", "--previous"])?;
            ensure!(previous.starts_with("run "), "--previous gave {previous:?}");
            let out = kubectl(bed, &["logs", &pod, "-c", "crasher"], None)?;
            let current = String::from_utf8_lossy(&out.stdout).into_owned();
            if !out.status.success() || !current.starts_with("run ") {
                return Ok(None);
            }
            let settled =
                |s: &Value| kubectl_state_is(s, "running") || kubectl_state_is(s, "waiting");
            let again = bed.cloud.get(&["pod", &pod])?;
            let state_after = again["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["name"] == "crasher")
                .map(|c| c["state"].clone())
                .unwrap_or_default();
            // Only a reading that no state change crossed counts.
            if state != state_after || !settled(&state) {
                return Ok(None);
            }
            let fits = if kubectl_state_is(&state, "running") {
                current != previous
            } else {
                current == previous
            };
            Ok(fits.then_some(()))
        },
    )
}

/// Whether a container status `state` object is `kind` (`running`, `waiting`, `terminated`).
fn kubectl_state_is(state: &Value, kind: &str) -> bool {
    state.get(kind).is_some()
}

fn exec_runs_a_command_with_its_exit_code(bed: &Bed, node: &StreamNode) -> Result<()> {
    let pod = talker(node);
    let out = kubectl(
        bed,
        &[
            "exec",
            &pod,
            "-c",
            "main",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        None,
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        stdout == "out\n",
        "exec stdout {stdout:?} (stderr {stderr:?})"
    );
    ensure!(stderr.contains("err\n"), "exec stderr {stderr:?}");
    ensure!(
        out.status.code() == Some(3),
        "kubectl exec exited {:?}, expected the command's 3 (stderr {stderr:?})",
        out.status
    );
    // stdin reaches the command, and its end ends it.
    let out = kubectl(
        bed,
        &[
            "exec",
            "-i",
            &pod,
            "-c",
            "main",
            "--",
            "sh",
            "-c",
            "tr a-z A-Z",
        ],
        Some(b"hello from stdin\n"),
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && stdout == "HELLO FROM STDIN\n",
        "exec -i: {:?} {stdout:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Runs the command after `--` in a pseudo-terminal of 40 rows × 100 columns, types a few
/// commands into it, and prints what the terminal showed; exits with the command's status.
const PTY_DRIVER: &str = r#"
import os, pty, sys, time, select, fcntl, termios, struct
argv = sys.argv[1:]
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack('HHHH', 40, 100, 0, 0))
    os.execvp(argv[0], argv)
seen = b''
def read_until(marker, timeout):
    global seen
    end = time.time() + timeout
    while marker not in seen and time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            seen += data
    return marker in seen
ok = read_until(b'# ', 30)
os.write(fd, b'stty size; echo answer=$((6*7))\r')
ok = ok and read_until(b'answer=42', 30)
os.write(fd, b'exit 7\r')
read_until(b'\x00never', 5)
_, status = os.waitpid(pid, 0)
sys.stdout.write(seen.decode('utf-8', 'replace'))
sys.exit(os.waitstatus_to_exitcode(status) if ok else 99)
"#;

fn exec_it_runs_an_interactive_shell_on_a_tty(bed: &Bed, node: &StreamNode) -> Result<()> {
    let pod = talker(node);
    let kubectl = kubectl_command(bed, &["exec", "-it", &pod, "-c", "main", "--", "sh"]);
    let out = Command::new("python3")
        .args(["-c", PTY_DRIVER])
        .arg(kubectl.get_program())
        .args(kubectl.get_args())
        .output()
        .context("python3 drives kubectl in a pseudo-terminal")?;
    let screen = String::from_utf8_lossy(&out.stdout);
    ensure!(
        screen.contains("answer=42"),
        "the shell did not answer through the terminal ({:?}): {screen:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        screen.contains("40 100"),
        "the terminal's size did not reach the shell: {screen:?}"
    );
    ensure!(
        out.status.code() == Some(7),
        "kubectl exec -it exited {:?}, expected the shell's 7: {screen:?}",
        out.status
    );
    Ok(())
}

fn attach_streams_the_main_process(bed: &Bed, node: &StreamNode) -> Result<()> {
    let pod = talker(node);
    let child = streaming(bed, &["attach", &pod, "-c", "main"])?;
    let lines = lines_until(child, Duration::from_secs(20), |l| consecutive(l, 5))?;
    ensure!(
        consecutive(&lines, 5),
        "kubectl attach gave {lines:?} in 20 s (a line is written every 0.2 s)"
    );
    Ok(())
}

fn stats_summary_through_the_node_proxy(bed: &Bed, node: &StreamNode) -> Result<()> {
    let path = format!("/api/v1/nodes/{}/proxy/stats/summary", node.node.name);
    let summary: Value = serde_json::from_str(&kubectl_ok(bed, &["get", "--raw", &path])?)
        .context("the summary is not JSON")?;
    ensure!(
        summary["node"]["nodeName"] == node.node.name.as_str(),
        "summary node: {}",
        summary["node"]
    );
    ensure!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "node memory: {}",
        summary["node"]
    );
    let pod = talker(node);
    let entry = summary["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["podRef"]["name"] == pod.as_str())
        .with_context(|| format!("pod {pod} not in the summary: {summary}"))?;
    let main = entry["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "main")
        .with_context(|| format!("container main not in {entry}"))?;
    ensure!(
        main["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap_or(0) > 0
            && main["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 0,
        "container main's stats: {main}"
    );
    Ok(())
}

fn resource_metrics_through_the_node_proxy(bed: &Bed, node: &StreamNode) -> Result<()> {
    let path = format!("/api/v1/nodes/{}/proxy/metrics/resource", node.node.name);
    let text = kubectl_ok(bed, &["get", "--raw", &path])?;
    let pod = talker(node);
    for wanted in [
        "node_cpu_usage_seconds_total ".to_owned(),
        "node_memory_working_set_bytes ".to_owned(),
        format!(
            "container_cpu_usage_seconds_total{{container=\"main\",namespace=\"default\",pod=\"{pod}\"}}"
        ),
        format!("pod_memory_working_set_bytes{{namespace=\"default\",pod=\"{pod}\"}}"),
    ] {
        ensure!(
            text.contains(&wanted),
            "{wanted:?} not in /metrics/resource:\n{text}"
        );
    }
    Ok(())
}

/// A pod in its grace period still answers `kubectl logs`, as kubelet's does: its container
/// traps SIGTERM and says so, and that line is read while the pod is `Terminating`.
fn logs_of_a_terminating_pod_are_served(bed: &Bed, node: &StreamNode) -> Result<()> {
    let pod = format!("stopping-{}", node.runtime);
    bed.cloud.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: default\nspec:\n  \
         nodeName: {node}\n  terminationGracePeriodSeconds: 60\n  containers:\n  \
         - name: main\n    image: wedge-test/busybox:1\n    imagePullPolicy: Never\n    \
         command: [\"sh\", \"-c\", \"trap 'echo got SIGTERM, finishing' TERM; echo started; \
         while true; do sleep 0.2; done\"]\n",
        node = node.node.name,
    ))?;
    let outcome = terminating_logs(bed, &pod);
    let _ = bed.cloud.kubectl(&[
        "delete",
        "pod",
        &pod,
        "--force",
        "--grace-period=0",
        "--ignore-not-found",
    ]);
    outcome
}

fn terminating_logs(bed: &Bed, pod: &str) -> Result<()> {
    wait_for("the pod runs", Duration::from_secs(90), || {
        let out = kubectl(bed, &["logs", pod], None)?;
        Ok(
            (out.status.success() && String::from_utf8_lossy(&out.stdout).contains("started"))
                .then_some(()),
        )
    })?;
    kubectl_ok(bed, &["delete", "pod", pod, "--wait=false"])?;
    let text = wait_for(
        "the container's SIGTERM line in kubectl logs",
        Duration::from_secs(30),
        || {
            let out = kubectl(bed, &["logs", pod], None)?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            Ok((out.status.success() && text.contains("got SIGTERM")).then_some(text))
        },
    )?;
    let object = bed.cloud.get(&["pod", pod])?;
    ensure!(
        object["metadata"]["deletionTimestamp"].is_string(),
        "the pod is not terminating any more: {}",
        object["metadata"]
    );
    ensure!(text.starts_with("started"), "logs: {text:?}");
    Ok(())
}

/// A Wasm pod (its module from a ConfigMap, as an operator ships one): `kubectl logs` is the
/// module's guest log, `-f` follows it as the module writes (here: a Device of its protocol
/// arrives and the mapper says it simulates it), and `kubectl exec` is refused with a reason
/// (a module has no process to run a command in).
fn wasm_pod_logs_are_the_modules_log(bed: &Bed, node: &StreamNode) -> Result<()> {
    let (pod, configmap, device) = (
        format!("wasm-{}", node.runtime),
        format!("wasm-module-{}", node.runtime),
        format!("wasm-logs-{}", node.runtime),
    );
    let module =
        wedge_tests::guests::try_module("virtual-thermometer").map_err(anyhow::Error::msg)?;
    let from_file = format!("--from-file=virtual-thermometer.wasm={}", module.display());
    let _ = bed
        .cloud
        .kubectl(&["delete", "configmap", &configmap, "--ignore-not-found"]);
    kubectl_ok(bed, &["create", "configmap", &configmap, &from_file])?;
    bed.cloud.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: default\nspec:\n  \
         nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  containers:\n  \
         - name: thermometer\n    image: configmap://{configmap}/virtual-thermometer.wasm\n",
        node = node.node.name,
    ))?;
    let outcome = wasm_pod_checks(bed, node, &pod, &device);
    let _ = bed
        .cloud
        .kubectl(&["delete", "device", &device, "--ignore-not-found"]);
    let _ = bed.cloud.kubectl(&[
        "delete",
        "devicemodel",
        "wasm-logs-model",
        "--ignore-not-found",
    ]);
    let _ = bed
        .cloud
        .kubectl(&["delete", "pod", &pod, "--wait=true", "--timeout=60s"]);
    let _ = bed.cloud.kubectl(&["delete", "configmap", &configmap]);
    outcome
}

fn wasm_pod_checks(bed: &Bed, node: &StreamNode, pod: &str, device: &str) -> Result<()> {
    wait_for("the Wasm pod runs", Duration::from_secs(90), || {
        let p = bed.cloud.get(&["pod", pod])?;
        Ok((p["status"]["phase"] == "Running").then_some(()))
    })?;
    let log = wait_for(
        "the module's first log line",
        Duration::from_secs(30),
        || {
            let out = kubectl(bed, &["logs", pod, "-c", "thermometer"], None)?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            Ok((out.status.success() && !text.is_empty()).then_some(text))
        },
    )?;
    ensure!(
        log.lines()
            .any(|l| l.starts_with("INFO virtual-thermometer ready")),
        "kubectl logs of the Wasm pod: {log:?}"
    );
    let (stamped, time, text) = last_line_stamped(bed, pod, "thermometer")?;
    ensure!(
        time.starts_with("20") && time.ends_with('Z') && text.starts_with("INFO "),
        "--timestamps --tail=1 of the Wasm pod: {stamped:?}"
    );
    let follow = streaming(bed, &["logs", "-f", pod, "-c", "thermometer"])?;
    std::thread::sleep(Duration::from_secs(1));
    bed.cloud.apply(&format!(
        "apiVersion: devices.kubeedge.io/v1beta1\nkind: DeviceModel\nmetadata:\n  \
         name: wasm-logs-model\n  namespace: default\nspec:\n  protocol: virtual\n  \
         properties:\n  - name: temperature\n    type: INT\n    accessMode: ReadOnly\n\
         ---\napiVersion: devices.kubeedge.io/v1beta1\nkind: Device\nmetadata:\n  \
         name: {device}\n  namespace: default\nspec:\n  deviceModelRef:\n    \
         name: wasm-logs-model\n  nodeName: {node}\n  protocol:\n    protocolName: virtual\n  \
         properties:\n  - name: temperature\n    collectCycle: 1000\n    visitors:\n      \
         protocolName: virtual\n      configData: {{}}\n",
        node = node.node.name,
    ))?;
    let shows_device = |l: &[(Duration, String)]| {
        l.iter()
            .any(|(_, l)| l.starts_with("INFO simulating") && l.contains(device))
    };
    let lines = lines_until(follow, Duration::from_secs(20), shows_device)?;
    ensure!(
        shows_device(&lines),
        "kubectl logs -f of the Wasm pod did not show the new device: {lines:?}"
    );
    let exec = kubectl(bed, &["exec", pod, "-c", "thermometer", "--", "true"], None)?;
    let said = String::from_utf8_lossy(&exec.stderr);
    ensure!(
        !exec.status.success() && said.contains("Wasm"),
        "kubectl exec into a Wasm container: {exec:?}"
    );
    Ok(())
}

/// `kubectl logs` first-byte latency and `kubectl exec` round trips, `rounds` each: printed.
fn timings(bed: &Bed, node: &StreamNode, rounds: usize) -> Result<()> {
    let pod = talker(node);
    let mut first_byte = Vec::new();
    let mut exec = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let mut child = kubectl_command(bed, &["logs", &pod, "-c", "main", "--tail=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut byte = [0u8; 1];
        child
            .stdout
            .as_mut()
            .context("no stdout")?
            .read_exact(&mut byte)?;
        first_byte.push(started.elapsed());
        let _ = child.wait();
        let started = Instant::now();
        kubectl_ok(bed, &["exec", &pod, "-c", "main", "--", "true"])?;
        exec.push(started.elapsed());
    }
    // A round trip inside one session: type a line into `cat`, read it back.
    let mut child = kubectl_command(bed, &["exec", "-i", &pod, "-c", "main", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().context("no stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
    let mut echo = Vec::new();
    for i in 0..rounds.max(1) * 4 {
        let started = Instant::now();
        writeln!(stdin, "ping {i}")?;
        stdin.flush()?;
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        ensure!(line.trim() == format!("ping {i}"), "cat echoed {line:?}");
        if i > 0 {
            echo.push(started.elapsed());
        }
    }
    drop(stdin);
    let _ = child.wait();
    let show = |name: &str, mut v: Vec<Duration>| {
        v.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        if let (Some(min), Some(max)) = (v.first(), v.last()) {
            println!(
                "bench [{}] {name}: n={} min {:.1} ms, median {:.1} ms, max {:.1} ms",
                node.runtime,
                v.len(),
                ms(*min),
                ms(v[v.len() / 2]),
                ms(*max)
            );
        }
    };
    show(
        "kubectl logs --tail=1, first byte (whole kubectl run)",
        first_byte,
    );
    show("kubectl exec -- true (whole kubectl run)", exec);
    show("exec session round trip (a line through cat)", echo);
    Ok(())
}
