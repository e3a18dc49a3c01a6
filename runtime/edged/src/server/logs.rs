//! `GET /containerLogs/{namespace}/{pod}/{container}`: `kubectl logs`.
//!
//! Where a container's output is read from:
//! - Docker: the engine's logs API (`follow`, `tail`, `since`, `timestamps` are Docker's own);
//! - a CRI runtime: the log file the runtime writes for the container (kubelet's way), read
//!   here: the tail found from the end of the file, `--since` by each line's time, `-f` by
//!   reading on from where the file ended until the container stops;
//! - a Wasm pod: the module's guest log (the last lines the Wasm host keeps, 512), as
//!   `<LEVEL> <text>` lines, followed while the module is deployed.
//!
//! The answer is streamed through a bounded queue: a client that reads slowly slows the
//! reader down, and a client that leaves ends it.

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::query::Query;
use super::{Body, NodeServer, text};
use crate::engine::RuntimeClient;
use crate::wasm_pods::WasmPods;

/// Chunks queued between the reader and the client.
const QUEUE: usize = 16;
/// How much of a file is read at once.
const READ_CHUNK: usize = 64 * 1024;
/// Longest line kept while its end has not been read (a damaged file); the rest is cut.
const MAX_PENDING: usize = 1 << 20;
/// How often a followed file is read again at its end.
const FOLLOW_POLL: Duration = Duration::from_millis(100);
/// How often a followed file's container is asked whether it still runs.
const RUNNING_CHECK: Duration = Duration::from_secs(1);
/// How often a followed module's log is read again.
const MODULE_POLL: Duration = Duration::from_millis(200);

/// What `kubectl logs` asks for (kubelet's `PodLogOptions` query names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRequest {
    /// `follow`: stream until the container stops.
    pub follow: bool,
    /// `previous`: the container's previous instance.
    pub previous: bool,
    /// `timestamps`: each line starts with its RFC 3339 time.
    pub timestamps: bool,
    /// `tailLines`: only the last lines.
    pub tail: Option<u64>,
    /// `sinceSeconds` or `sinceTime`: only lines from then on.
    pub since: Option<SystemTime>,
    /// `limitBytes`: stop after this many bytes.
    pub limit: Option<u64>,
    /// Standard output is wanted (`stream` is `All` or `Stdout`).
    pub stdout: bool,
    /// Standard error is wanted (`stream` is `All` or `Stderr`).
    pub stderr: bool,
}

impl LogRequest {
    /// Reads the query, refusing what kubelet's validation refuses (naming the key).
    pub fn from_query(raw: &str, now: SystemTime) -> Result<LogRequest, String> {
        let q = Query::parse(raw);
        let tail = match q.number("tailLines")? {
            Some(n) if n < 0 => return Err(format!("tailLines={n} must be at least 0")),
            n => n.map(i64::unsigned_abs),
        };
        let limit = match q.number("limitBytes")? {
            Some(n) if n < 1 => return Err(format!("limitBytes={n} must be at least 1")),
            n => n.map(i64::unsigned_abs),
        };
        let since_seconds = q.number("sinceSeconds")?;
        let since_time = q.get("sinceTime").filter(|t| !t.is_empty());
        let since = match (since_seconds, since_time) {
            (Some(_), Some(_)) => {
                return Err("sinceSeconds and sinceTime cannot both be set".into());
            }
            (Some(n), None) if n < 1 => {
                return Err(format!("sinceSeconds={n} must be at least 1"));
            }
            (Some(n), None) => now.checked_sub(Duration::from_secs(n.unsigned_abs())),
            (None, Some(t)) => Some(
                wedge_cri::parse_rfc3339(t)
                    .ok_or_else(|| format!("sinceTime={t:?} is not an RFC 3339 time"))?,
            ),
            (None, None) => None,
        };
        let (stdout, stderr) = match q.get("stream") {
            None | Some("" | "All") => (true, true),
            Some("Stdout") => (true, false),
            Some("Stderr") => (false, true),
            Some(other) => {
                return Err(format!("stream={other:?}: expected All, Stdout or Stderr"));
            }
        };
        Ok(LogRequest {
            follow: q.flag("follow")?,
            previous: q.flag("previous")?,
            timestamps: q.flag("timestamps")?,
            tail,
            since,
            limit,
            stdout,
            stderr,
        })
    }
}

/// Serves one `/containerLogs` request.
pub(super) async fn serve(
    server: &NodeServer,
    namespace: &str,
    name: &str,
    container: &str,
    query: &str,
    shutdown: CancellationToken,
) -> Response<Body> {
    let request = match LogRequest::from_query(query, SystemTime::now()) {
        Ok(request) => request,
        Err(e) => return text(StatusCode::BAD_REQUEST, &e),
    };
    let pod = match server.find(namespace, name, container) {
        Ok(pod) => pod,
        Err(refused) => return refused.answer(),
    };
    let (tx, rx) = mpsc::channel(QUEUE);
    let out = Out {
        tx,
        left: request.limit,
    };
    if let Some(modules) = &pod.wasm {
        let (Some(module), Some(wasm)) = (modules.get(container), server.wasm.clone()) else {
            return text(
                StatusCode::BAD_REQUEST,
                &format!(
                    "container {container:?} in pod {namespace}/{name} is not running a module yet"
                ),
            );
        };
        if request.previous {
            return text(
                StatusCode::BAD_REQUEST,
                &format!(
                    "previous terminated container {container:?} in pod {namespace}/{name} not \
                     found (a Wasm container's module restarts in place: its log runs on)"
                ),
            );
        }
        spawn_logged(module_logs(wasm, module.clone(), request, out), shutdown);
        return streaming(rx);
    }
    let instances = match server.instances(&pod, container).await {
        Ok(instances) => instances,
        Err(refused) => return refused.answer(),
    };
    // kubelet's `lastState.terminated`: the instance before the current one while that one
    // runs (or is made and about to); the newest itself once it ended, when it waits in its
    // back-off (the one before it may be gone to the container GC).
    let newest_ended = instances
        .first()
        .is_some_and(|c| !matches!(c.state.as_str(), "running" | "created"));
    let chosen = if request.previous && !newest_ended {
        instances.get(1)
    } else {
        instances.first()
    };
    let Some(chosen) = chosen else {
        let what = if request.previous {
            "previous terminated container"
        } else {
            "container"
        };
        return text(
            StatusCode::BAD_REQUEST,
            &format!("{what} {container:?} in pod {namespace}/{name} not found"),
        );
    };
    let id = chosen.id.clone();
    match server.engine.client().await {
        Ok(RuntimeClient::Docker(docker)) => {
            spawn_logged(docker_logs(docker.clone(), id, request, out), shutdown);
        }
        Ok(RuntimeClient::Cri(cri)) => {
            let status = match cri.container_status(&id).await {
                Ok(status) => status,
                Err(e) => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        &format!("container {container:?} in pod {namespace}/{name}: {e}"),
                    );
                }
            };
            let path = PathBuf::from(&status.log_path);
            if !path.is_absolute() {
                return text(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "container {container:?} in pod {namespace}/{name} has no log file \
                         (log path {:?})",
                        status.log_path
                    ),
                );
            }
            spawn_logged(file_logs(cri.clone(), id, path, request, out), shutdown);
        }
        Err(e) => {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("the container runtime is not available: {e}"),
            );
        }
    }
    streaming(rx)
}

/// Runs a log reader until it ends, the client leaves, or the node stops.
fn spawn_logged(
    reader: impl std::future::Future<Output = ()> + Send + 'static,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        tokio::select! {
            () = reader => {}
            () = shutdown.cancelled() => {}
        }
    });
}

/// A `200` whose body is what the reader queues.
fn streaming(rx: mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Response<Body> {
    let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk.map(Frame::data), rx))
    });
    let mut answer = Response::new(BodyExt::boxed(StreamBody::new(chunks)));
    answer.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    answer
}

/// Where a reader writes: the client's queue, within `limitBytes`.
struct Out {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    left: Option<u64>,
}

impl Out {
    /// Queues `bytes` (cut at the limit); false once nothing more is wanted.
    async fn send(&mut self, mut bytes: Vec<u8>) -> bool {
        if let Some(left) = &mut self.left {
            let room = usize::try_from(*left).unwrap_or(usize::MAX);
            bytes.truncate(room);
            *left -= bytes.len() as u64;
        }
        if !bytes.is_empty() && self.tx.send(Ok(Bytes::from(bytes))).await.is_err() {
            return false;
        }
        self.left != Some(0)
    }

    /// The client has gone.
    fn gone(&self) -> bool {
        self.tx.is_closed()
    }

    /// Ends the answer with an error the client sees as a broken body, after a line saying
    /// why (kubelet writes such errors into the stream too).
    async fn fail(&mut self, why: String) {
        tracing::debug!("container log read failed: {why}");
        let _ = self.send(format!("{why}\n").into_bytes()).await;
    }
}

/// Docker's logs API, relayed.
async fn docker_logs(docker: bollard::Docker, id: String, request: LogRequest, mut out: Out) {
    let since = request
        .since
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i32::try_from(d.as_secs()).unwrap_or(i32::MAX));
    let options = bollard::query_parameters::LogsOptions {
        follow: request.follow,
        stdout: request.stdout,
        stderr: request.stderr,
        since,
        until: 0,
        timestamps: request.timestamps,
        tail: request
            .tail
            .map_or_else(|| "all".to_owned(), |n| n.to_string()),
    };
    let mut logs = docker.logs(&id, Some(options));
    while let Some(item) = logs.next().await {
        match item {
            Ok(output) => {
                if !out.send(output.into_bytes().to_vec()).await {
                    return;
                }
            }
            Err(e) => return out.fail(format!("reading the container's log: {e}")).await,
        }
    }
}

/// The offset in `path` where its last `lines` lines start.
#[cfg(test)]
fn tail_offset(path: &Path, lines: u64) -> std::io::Result<u64> {
    tail_span(path, lines).map(|(at, _)| at)
}

/// Where the last `lines` lines of `path` start, and the file's length when they were
/// counted: without `follow`, the tail ends there (a line written meanwhile is not one of
/// the last `lines`).
fn tail_span(path: &Path, lines: u64) -> std::io::Result<(u64, u64)> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    tail_within(&mut file, len, lines).map(|at| (at, len))
}

fn tail_within(file: &mut std::fs::File, len: u64, lines: u64) -> std::io::Result<u64> {
    use std::io::{Read, Seek};
    if lines == 0 {
        return Ok(len);
    }
    let mut end = len;
    // A last line without its newline counts as a line.
    let mut seen = 0u64;
    let mut first = true;
    let mut block = vec![0u8; READ_CHUNK];
    while end > 0 {
        let start = end.saturating_sub(READ_CHUNK as u64);
        let size = usize::try_from(end - start).unwrap_or(READ_CHUNK);
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block[..size])?;
        for i in (0..size).rev() {
            if block[i] != b'\n' {
                continue;
            }
            let at = start + i as u64;
            if first && at + 1 == len {
                // The file's final newline ends the last line; it does not start one.
                first = false;
                continue;
            }
            first = false;
            seen += 1;
            if seen == lines {
                return Ok(at + 1);
            }
        }
        first = false;
        end = start;
    }
    Ok(0)
}

/// A CRI log file, relayed line by line.
async fn file_logs(
    cri: wedge_cri::Cri,
    id: String,
    path: PathBuf,
    request: LogRequest,
    mut out: Out,
) {
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(file) => file,
        Err(e) => {
            return out
                .fail(format!("the container's log file {}: {e}", path.display()))
                .await;
        }
    };
    // Without `follow`, a tail ends where the file ended when its lines were counted.
    let mut left: Option<u64> = None;
    if let Some(lines) = request.tail {
        let at = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || tail_span(&path, lines)).await
        };
        match at {
            Ok(Ok((at, len))) => {
                if let Err(e) = file.seek(SeekFrom::Start(at)).await {
                    return out.fail(format!("seeking the log file: {e}")).await;
                }
                if !request.follow {
                    left = Some(len.saturating_sub(at));
                }
            }
            Ok(Err(e)) => return out.fail(format!("reading the log file: {e}")).await,
            Err(e) => return out.fail(format!("reading the log file: {e}")).await,
        }
    }
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut last_check = tokio::time::Instant::now();
    let mut stopped = false;
    let mut rotated = false;
    loop {
        let want = left.map_or(buf.len(), |l| {
            usize::try_from(l).unwrap_or(usize::MAX).min(buf.len())
        });
        let n = match file.read(&mut buf[..want]).await {
            Ok(n) => n,
            Err(e) => return out.fail(format!("reading the log file: {e}")).await,
        };
        if let Some(l) = left.as_mut() {
            *l -= n as u64;
        }
        if n > 0 {
            pending.extend_from_slice(&buf[..n]);
            let mut start = 0;
            while let Some(newline) = pending[start..].iter().position(|&b| b == b'\n') {
                let line = &pending[start..start + newline];
                start += newline + 1;
                if let Some(bytes) = render(line, &request)
                    && !out.send(bytes).await
                {
                    return;
                }
            }
            pending.drain(..start);
            if pending.len() > MAX_PENDING {
                pending.truncate(MAX_PENDING);
            }
            continue;
        }
        // At the end of what was written.
        if !request.follow || stopped || out.gone() {
            return;
        }
        // Log rotation renamed the file away and the runtime now writes a new one at the
        // path: once the old one has been read to its end (again, for what came in just
        // before the rename), go on with the new one from its start.
        if rotated {
            match tokio::fs::File::open(&path).await {
                Ok(next) => {
                    file = next;
                    rotated = false;
                    continue;
                }
                Err(e) => return out.fail(format!("reopening the rotated log: {e}")).await,
            }
        }
        if replaced(&file, &path).await {
            rotated = true;
            continue;
        }
        if last_check.elapsed() >= RUNNING_CHECK {
            last_check = tokio::time::Instant::now();
            let running = cri
                .container_status(&id)
                .await
                .map(|s| s.state == wedge_cri::v1::ContainerState::ContainerRunning as i32)
                .unwrap_or(false);
            if !running {
                // One more read for what it wrote before stopping, then the end.
                stopped = true;
                continue;
            }
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// Whether `path` is now another file than the open `file` (log rotation made a new one).
/// A path that is missing for a moment (between the rename and the runtime's reopen) is not
/// a new file yet.
async fn replaced(file: &tokio::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata().await, tokio::fs::metadata(path).await) {
        (Ok(open), Ok(now)) => (open.dev(), open.ino()) != (now.dev(), now.ino()),
        _ => false,
    }
}

/// One CRI log line as `kubectl logs` prints it, or `None` when it is filtered out or is
/// not a log line (skipped, as kubelet skips them).
fn render(line: &[u8], request: &LogRequest) -> Option<Vec<u8>> {
    let parsed = wedge_cri::logs::parse_line(line).ok()?;
    let wanted = match parsed.stream {
        wedge_cri::logs::Stream::Stdout => request.stdout,
        wedge_cri::logs::Stream::Stderr => request.stderr,
    };
    if !wanted || request.since.is_some_and(|since| parsed.time < since) {
        return None;
    }
    let mut bytes = Vec::with_capacity(parsed.content.len() + 40);
    if request.timestamps {
        bytes.extend_from_slice(parsed.timestamp.as_bytes());
        bytes.push(b' ');
    }
    bytes.extend_from_slice(parsed.content);
    if !parsed.partial {
        bytes.push(b'\n');
    }
    Some(bytes)
}

/// A Wasm module's guest log, relayed.
async fn module_logs(wasm: Arc<dyn WasmPods>, module: String, request: LogRequest, mut out: Out) {
    let since_ms = request
        .since
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut after = 0;
    let mut first = true;
    loop {
        let Some(mut lines) = wasm.log_lines(&module, after) else {
            return out
                .fail(format!("module {module:?} is no longer deployed"))
                .await;
        };
        if let Some(last) = lines.last() {
            after = last.seq;
        }
        lines.retain(|l| since_ms.is_none_or(|since| l.unix_ms >= since));
        if first && let Some(tail) = request.tail {
            let keep = usize::try_from(tail).unwrap_or(usize::MAX);
            let skip = lines.len().saturating_sub(keep);
            lines.drain(..skip);
        }
        first = false;
        for line in lines {
            let mut bytes = Vec::with_capacity(line.text.len() + 40);
            if request.timestamps {
                // RFC 3339 with the milliseconds the host kept, as kubectl's other lines carry
                // their fraction.
                let ms = i64::try_from(line.unix_ms).unwrap_or(i64::MAX);
                let seconds = wedge_core::time::rfc3339_utc(ms);
                let seconds = seconds.strip_suffix('Z').unwrap_or(&seconds);
                bytes.extend_from_slice(
                    format!("{seconds}.{:03}Z ", line.unix_ms % 1000).as_bytes(),
                );
            }
            bytes.extend_from_slice(line.level.to_ascii_uppercase().as_bytes());
            bytes.push(b' ');
            bytes.extend_from_slice(line.text.as_bytes());
            bytes.push(b'\n');
            if !out.send(bytes).await {
                return;
            }
        }
        if !request.follow || out.gone() {
            return;
        }
        tokio::time::sleep(MODULE_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(query: &str) -> LogRequest {
        LogRequest::from_query(query, UNIX_EPOCH + Duration::from_secs(1_000)).unwrap()
    }

    #[test]
    fn queries_read_as_kubelet_reads_them() {
        let r = request("follow=true&tailLines=10&sinceSeconds=100&timestamps=1&limitBytes=5");
        assert!(r.follow && r.timestamps && !r.previous);
        assert_eq!(r.tail, Some(10));
        assert_eq!(r.limit, Some(5));
        assert_eq!(r.since, Some(UNIX_EPOCH + Duration::from_secs(900)));
        assert!(r.stdout && r.stderr);
        let r = request("sinceTime=2024-05-01T10:20:30Z&stream=Stderr&previous=true");
        assert!(r.previous && !r.stdout && r.stderr);
        assert!(r.since.is_some());
        for bad in [
            "tailLines=-1",
            "limitBytes=0",
            "sinceSeconds=0",
            "sinceSeconds=5&sinceTime=2024-05-01T10:20:30Z",
            "sinceTime=yesterday",
            "stream=Both",
            "follow=maybe",
        ] {
            assert!(
                LogRequest::from_query(bad, SystemTime::now()).is_err(),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn cri_lines_render_with_their_options() {
        let all = request("");
        let line = b"2024-05-01T10:20:30.5Z stdout F hello";
        assert_eq!(render(line, &all).unwrap(), b"hello\n");
        let part = b"2024-05-01T10:20:30.5Z stdout P hel";
        assert_eq!(render(part, &all).unwrap(), b"hel");
        let stamped = request("timestamps=true");
        assert_eq!(
            render(line, &stamped).unwrap(),
            b"2024-05-01T10:20:30.5Z hello\n"
        );
        let errors = request("stream=Stderr");
        assert!(render(line, &errors).is_none());
        let later = request("sinceTime=2024-05-01T10:20:31Z");
        assert!(render(line, &later).is_none());
        assert!(render(b"not a log line", &all).is_none());
    }

    /// A module host with a fixed guest log, deployed until `gone` is set.
    struct OneModule {
        lines: Vec<crate::wasm_pods::ModuleLogLine>,
        gone: std::sync::atomic::AtomicBool,
    }

    impl WasmPods for OneModule {
        fn start(
            &self,
            _: crate::wasm_pods::ModuleSource,
        ) -> crate::wasm_pods::BoxFuture<'_, Result<String, String>> {
            Box::pin(async { Err("not here".to_owned()) })
        }
        fn stop(&self, _: &str) -> crate::wasm_pods::BoxFuture<'_, Result<(), String>> {
            Box::pin(async { Ok(()) })
        }
        fn state(&self, _: &str) -> Option<crate::wasm_pods::ModuleState> {
            None
        }
        fn log_lines(&self, _: &str, after: u64) -> Option<Vec<crate::wasm_pods::ModuleLogLine>> {
            if self.gone.load(std::sync::atomic::Ordering::Relaxed) {
                return None;
            }
            Some(
                self.lines
                    .iter()
                    .filter(|l| l.seq > after)
                    .cloned()
                    .collect(),
            )
        }
    }

    async fn module_text(host: Arc<OneModule>, query: &str) -> String {
        let request =
            LogRequest::from_query(query, UNIX_EPOCH + Duration::from_secs(1_000)).unwrap();
        let (tx, mut rx) = mpsc::channel(QUEUE);
        let out = Out {
            tx,
            left: request.limit,
        };
        tokio::spawn(module_logs(host, "m".into(), request, out));
        let mut text = Vec::new();
        while let Some(Ok(chunk)) = rx.recv().await {
            text.extend_from_slice(&chunk);
        }
        String::from_utf8(text).unwrap()
    }

    #[tokio::test]
    async fn a_modules_log_reads_as_container_logs() {
        let line =
            |seq: u64, unix_ms: u64, level: &str, text: &str| crate::wasm_pods::ModuleLogLine {
                seq,
                unix_ms,
                level: level.into(),
                text: text.into(),
            };
        let host = Arc::new(OneModule {
            lines: vec![
                line(1, 998_000, "info", "started"),
                line(2, 999_500, "warn", "sensor slow"),
                line(3, 999_900, "error", "sensor gone"),
            ],
            gone: false.into(),
        });
        assert_eq!(
            module_text(host.clone(), "").await,
            "INFO started\nWARN sensor slow\nERROR sensor gone\n"
        );
        assert_eq!(
            module_text(host.clone(), "tailLines=1").await,
            "ERROR sensor gone\n"
        );
        assert_eq!(
            module_text(host.clone(), "sinceSeconds=1").await,
            "WARN sensor slow\nERROR sensor gone\n"
        );
        assert_eq!(
            module_text(host.clone(), "tailLines=1&timestamps=true").await,
            "1970-01-01T00:16:39.900Z ERROR sensor gone\n"
        );
        assert_eq!(module_text(host.clone(), "limitBytes=6").await, "INFO s");
        // Followed until the module goes, which ends the answer with the reason.
        let follow = tokio::spawn(module_text(host.clone(), "follow=true&tailLines=1"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        host.gone.store(true, std::sync::atomic::Ordering::Relaxed);
        let text = follow.await.unwrap();
        assert_eq!(
            text,
            "ERROR sensor gone\nmodule \"m\" is no longer deployed\n"
        );
    }

    #[test]
    fn the_tail_starts_at_the_right_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, b"a\nb\nc\n").unwrap();
        assert_eq!(tail_offset(&path, 1).unwrap(), 4);
        assert_eq!(tail_offset(&path, 2).unwrap(), 2);
        assert_eq!(tail_offset(&path, 3).unwrap(), 0);
        assert_eq!(tail_offset(&path, 9).unwrap(), 0);
        assert_eq!(tail_offset(&path, 0).unwrap(), 6);
        // A last line still being written counts.
        std::fs::write(&path, b"a\nb\nc").unwrap();
        assert_eq!(tail_offset(&path, 1).unwrap(), 4);
        // Lines longer than a read block.
        let long = "x".repeat(READ_CHUNK + 10);
        std::fs::write(&path, format!("{long}\n{long}\nend\n")).unwrap();
        assert_eq!(tail_offset(&path, 2).unwrap(), (long.len() + 1) as u64);
    }
}
