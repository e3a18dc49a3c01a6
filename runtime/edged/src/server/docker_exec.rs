//! `kubectl exec` and `kubectl attach` on Docker (see [`super::exec`]): the remotecommand
//! protocol is spoken here ([`wedge_remotecommand`]) and bridged to Docker's own hijacked
//! exec and attach connections.

use bytes::Bytes;
use futures_util::StreamExt;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;
use wedge_remotecommand::{ExitOutcome, StreamOptions};

use super::exec::Kind;
use super::exec::switching_protocols;
use super::{Body, NodeServer, text};

/// Speaks the remotecommand protocol to the client and bridges it to a Docker exec (a new
/// process) or attach (the container's own).
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve(
    server: &NodeServer,
    docker: bollard::Docker,
    kind: Kind,
    id: String,
    command: Vec<String>,
    options: StreamOptions,
    mut req: Request<Incoming>,
    shutdown: CancellationToken,
) -> Response<Body> {
    let protocol = match wedge_remotecommand::negotiate(req.headers()) {
        Ok(protocol) => protocol,
        Err(refusal) => return refusal_answer(refusal),
    };
    // Whatever Docker refuses is said before the upgrade, as an HTTP error kubectl prints.
    let started = match kind {
        Kind::Exec => {
            let created = docker
                .create_exec(
                    &id,
                    bollard::exec::CreateExecOptions::<String> {
                        attach_stdin: Some(options.stdin),
                        attach_stdout: Some(options.stdout),
                        attach_stderr: Some(options.stderr),
                        tty: Some(options.tty),
                        cmd: Some(command),
                        ..Default::default()
                    },
                )
                .await;
            match created {
                Ok(created) => DockerStream::Exec(created.id),
                Err(e) => {
                    return text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("exec in container {id}: {e}"),
                    );
                }
            }
        }
        Kind::Attach => DockerStream::Attach(id.clone()),
    };
    let client_side = hyper::upgrade::on(&mut req);
    let setup = server.settings.stream_setup_timeout;
    tokio::spawn(async move {
        let upgraded = match client_side.await {
            Ok(upgraded) => upgraded,
            Err(e) => return tracing::debug!("exec stream not upgraded: {e}"),
        };
        let session =
            match wedge_remotecommand::accept(TokioIo::new(upgraded), protocol, options, setup)
                .await
            {
                Ok(session) => session,
                Err(e) => return tracing::debug!("exec stream not set up: {e}"),
            };
        tokio::select! {
            () = bridge(docker, started, options, session) => {}
            () = shutdown.cancelled() => {}
        }
    });
    switching_protocols(wedge_remotecommand::upgrade_response_headers(protocol))
}

/// What a Docker stream joins.
#[derive(Clone)]
enum DockerStream {
    /// A created exec.
    Exec(String),
    /// A container's main process.
    Attach(String),
}

/// Moves bytes between the client's session and Docker until the process ends or the client
/// leaves, then reports how it ended.
async fn bridge(
    docker: bollard::Docker,
    stream: DockerStream,
    options: StreamOptions,
    mut session: wedge_remotecommand::Session,
) {
    let attached = match &stream {
        DockerStream::Exec(exec) => {
            let started = docker
                .start_exec(
                    exec,
                    Some(bollard::exec::StartExecOptions {
                        detach: false,
                        tty: options.tty,
                        output_capacity: None,
                    }),
                )
                .await;
            match started {
                Ok(bollard::exec::StartExecResults::Attached { output, input }) => {
                    Ok((output, input))
                }
                Ok(bollard::exec::StartExecResults::Detached) => {
                    Err("Docker started the exec detached".to_owned())
                }
                Err(e) => Err(format!("starting the exec: {e}")),
            }
        }
        DockerStream::Attach(id) => docker
            .attach_container(
                id,
                Some(bollard::query_parameters::AttachContainerOptions {
                    stdin: options.stdin,
                    stdout: options.stdout,
                    stderr: options.stderr,
                    stream: true,
                    logs: false,
                    detach_keys: None,
                }),
            )
            .await
            .map(|a| (a.output, a.input))
            .map_err(|e| format!("attaching to the container: {e}")),
    };
    let (mut output, mut input) = match attached {
        Ok(pair) => pair,
        Err(why) => {
            let _ = session.finish(ExitOutcome::Error(why)).await;
            return;
        }
    };
    // Stdin and resizes run beside the output; the output's end is the process's end.
    let stdin = session.stdin.take();
    let resize = session.resize.take();
    let feeder = tokio::spawn(async move {
        let Some(mut stdin) = stdin else { return };
        while let Some(chunk) = stdin.recv().await {
            if input.write_all(&chunk).await.is_err() || input.flush().await.is_err() {
                return;
            }
        }
        // The client closed stdin: so does the process's.
        let _ = input.shutdown().await;
    });
    let resizer = {
        let docker = docker.clone();
        let stream = stream.clone();
        tokio::spawn(async move {
            let Some(mut resize) = resize else { return };
            while let Some(size) = resize.recv().await {
                let done = match &stream {
                    DockerStream::Exec(exec) => {
                        docker
                            .resize_exec(
                                exec,
                                bollard::exec::ResizeExecOptions {
                                    height: size.height,
                                    width: size.width,
                                },
                            )
                            .await
                    }
                    DockerStream::Attach(id) => {
                        docker
                            .resize_container_tty(
                                id,
                                bollard::query_parameters::ResizeContainerTTYOptions {
                                    h: i32::from(size.height),
                                    w: i32::from(size.width),
                                },
                            )
                            .await
                    }
                };
                if let Err(e) = done {
                    tracing::debug!("terminal resize refused: {e}");
                }
            }
        })
    };
    let gone = session.peer_gone();
    let stdout = session.stdout.clone();
    let stderr = session.stderr.clone();
    let mut failed = None;
    let mut left = false;
    loop {
        let item = tokio::select! {
            item = output.next() => item,
            () = gone.wait() => {
                left = true;
                break;
            }
        };
        let Some(item) = item else { break };
        let (to, message) = match item {
            Ok(bollard::container::LogOutput::StdErr { message }) => (&stderr, message),
            Ok(
                bollard::container::LogOutput::StdOut { message }
                | bollard::container::LogOutput::Console { message },
            ) => (&stdout, message),
            Ok(bollard::container::LogOutput::StdIn { .. }) => continue,
            Err(e) => {
                failed = Some(format!("reading the process's output: {e}"));
                break;
            }
        };
        // Output the client did not ask for is not sent (with a TTY, Docker merges stderr
        // into the terminal's output anyway).
        if let Some(to) = to
            && to.send(Bytes::from(message.to_vec())).await.is_err()
        {
            left = true;
            break;
        }
    }
    feeder.abort();
    resizer.abort();
    if left {
        // The client left: nobody is there to read a status. An exec'd process goes on as
        // with kubelet (Docker has no call to signal an exec).
        return;
    }
    let outcome = if let Some(why) = failed {
        ExitOutcome::Error(why)
    } else {
        match &stream {
            DockerStream::Exec(exec) => match docker.inspect_exec(exec).await {
                Ok(inspected) => match inspected.exit_code {
                    Some(0) | None => ExitOutcome::Success,
                    Some(code) => ExitOutcome::ExitCode(i32::try_from(code).unwrap_or(i32::MAX)),
                },
                Err(e) => ExitOutcome::Error(format!("reading the exec's exit code: {e}")),
            },
            DockerStream::Attach(_) => ExitOutcome::Success,
        }
    };
    if let Err(e) = session.finish(outcome).await {
        tracing::debug!("exec stream did not end cleanly: {e}");
    }
}

/// The HTTP answer to an upgrade the protocol layer refused.
fn refusal_answer(refusal: wedge_remotecommand::Refusal) -> Response<Body> {
    let mut answer = text(refusal.status, &refusal.body());
    for (name, value) in &refusal.headers() {
        answer.headers_mut().append(name.clone(), value.clone());
    }
    answer
}
