//! The connection to a runtime: one channel over its unix socket, shared by both services.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::error::{unreachable_reason, with_sources};
use crate::v1::image_service_client::ImageServiceClient;
use crate::v1::runtime_service_client::RuntimeServiceClient;
use crate::v1::{VersionRequest, VersionResponse};
use crate::{CRI_VERSION, CriError, CriOptions, socket_path};

/// A connected CRI v1 runtime (RuntimeService and ImageService on one socket, as containerd
/// serves them). Cheap to clone: clones share the HTTP/2 connection, which is re-dialled on
/// its own after the runtime restarts, so edged keeps one `Cri` for its whole life.
#[derive(Clone, Debug)]
pub struct Cri {
    endpoint: String,
    socket: PathBuf,
    options: CriOptions,
    version: VersionResponse,
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
}

impl Cri {
    /// Connects to `endpoint` (`unix:///path/to.sock` or `/path/to.sock`) with the default
    /// deadlines, and checks that it answers CRI v1's Version.
    pub async fn connect(endpoint: &str) -> Result<Self, CriError> {
        Self::connect_with(endpoint, CriOptions::default()).await
    }

    /// Connects as [`Cri::connect`] does, with chosen deadlines. Fails with
    /// [`CriError::Unreachable`] when nothing listens on the socket and with
    /// [`CriError::NotCri`] when what listens does not answer Version within
    /// `options.connect_timeout`; both name the endpoint.
    pub async fn connect_with(endpoint: &str, options: CriOptions) -> Result<Self, CriError> {
        let socket = socket_path(endpoint)?;
        let dial = socket.clone();
        // The URI is required by tonic and unused: every connection goes to `socket`.
        let channel = Endpoint::from_static("http://cri.sock")
            .connect_timeout(options.connect_timeout)
            .connect_with_connector(tower::service_fn(move |_| {
                let dial = dial.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(&dial).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await
            .map_err(|error| CriError::Unreachable {
                endpoint: endpoint.to_owned(),
                reason: unreachable_reason(&error),
            })?;
        let mut runtime = RuntimeServiceClient::new(channel.clone());
        let image = ImageServiceClient::new(channel);
        let version = runtime
            .version(request(
                VersionRequest {
                    version: CRI_VERSION.to_owned(),
                },
                Some(options.connect_timeout),
            ))
            .await
            .map_err(|status| CriError::NotCri {
                endpoint: endpoint.to_owned(),
                reason: not_cri_reason(&status, options.connect_timeout),
            })?
            .into_inner();
        Ok(Self {
            endpoint: endpoint.to_owned(),
            socket,
            options,
            version,
            runtime,
            image,
        })
    }

    /// The endpoint as given to connect, for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The socket the endpoint names.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The deadlines in use.
    pub fn options(&self) -> &CriOptions {
        &self.options
    }

    /// What the runtime answered to Version when we connected (name, version, API version).
    pub fn connected_version(&self) -> &VersionResponse {
        &self.version
    }

    /// The runtime as node status shows it (`status.nodeInfo.containerRuntimeVersion`):
    /// `<runtime_name>://<runtime_version>`, e.g. `containerd://1.6.20~ds1`.
    pub fn container_runtime_version(&self) -> String {
        format!(
            "{}://{}",
            self.version.runtime_name, self.version.runtime_version
        )
    }

    /// A client of RuntimeService over the shared connection, for what the typed methods do
    /// not cover (verbose answers, options of our own). Add a deadline to its requests.
    pub fn runtime(&self) -> RuntimeServiceClient<Channel> {
        self.runtime.clone()
    }

    /// A client of ImageService over the shared connection, as [`Cri::runtime`].
    pub fn image(&self) -> ImageServiceClient<Channel> {
        self.image.clone()
    }
}

/// A request with a deadline: tonic sends it as `grpc-timeout` (the runtime gives up too) and
/// enforces it on our side, answering DeadlineExceeded.
pub(crate) fn request<M>(message: M, timeout: Option<Duration>) -> tonic::Request<M> {
    let mut request = tonic::Request::new(message);
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    request
}

/// Why a connected peer is not taken for a CRI runtime, in words an operator can act on.
fn not_cri_reason(status: &tonic::Status, timeout: Duration) -> String {
    use tonic::Code;
    let detail = with_sources(
        status.message().to_owned(),
        std::error::Error::source(status),
    );
    match status.code() {
        Code::Unimplemented => format!(
            "it serves no runtime.v1.RuntimeService (a containerd with the CRI plugin disabled, \
             such as Docker's own, or a runtime older than CRI v1): {detail}"
        ),
        Code::DeadlineExceeded | Code::Cancelled => {
            format!("no answer to Version within {timeout:?}: {detail}")
        }
        code => format!("Version failed ({code:?}; not a gRPC server?): {detail}"),
    }
}
