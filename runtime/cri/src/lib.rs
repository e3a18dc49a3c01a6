//! A CRI v1 client: how edged runs pods on a container runtime (containerd 1.6 and later)
//! through the same gRPC API a kubelet uses, over the runtime's unix socket.
//!
//! [`Cri::connect`] dials `unix:///run/containerd/containerd.sock` (KubeEdge's
//! `containerRuntimeEndpoint` form) or a bare socket path, and proves the peer speaks CRI by
//! asking its version, so a wrong path or a non-CRI socket fails at start-up with the endpoint
//! named. The [`Cri`] methods are thin: they take and return the generated messages of
//! [`v1`], add a deadline to every call and turn gRPC statuses into [`CriError`]. For a call or
//! option they do not cover, [`Cri::runtime`] and [`Cri::image`] hand out the raw clients.
//!
//! [`logs`] reads the log files the runtime writes for each container (`ContainerConfig.log_path`),
//! which is where `kubectl logs` is served from.
#![warn(missing_docs)]

mod client;
mod endpoint;
mod error;
mod image;
pub mod logs;
mod options;
mod runtime;
mod timestamp;

/// The CRI v1 messages and clients generated from `proto/runtime/v1/api.proto` (package
/// `runtime.v1`, a subset of Kubernetes' definition with the same field numbers).
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("runtime.v1");
}

pub use client::Cri;
pub use endpoint::socket_path;
pub use error::CriError;
pub use options::CriOptions;
pub use timestamp::parse_rfc3339;

/// The CRI version this client speaks, sent in `VersionRequest` (as kubelet does).
pub const CRI_VERSION: &str = "v1";
