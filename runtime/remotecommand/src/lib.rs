//! The server end of Kubernetes' remotecommand protocol over SPDY/3.1: what kubelet serves on
//! `/exec/{namespace}/{pod}/{container}` and `/attach/...`, so that `kubectl exec -it` and
//! `kubectl attach` reach a container through the kube-apiserver.
//!
//! The HTTP layer (hyper 1) does the upgrade:
//!
//! 1. [`StreamOptions::from_query`] (and [`command_from_query`] for exec) read the query;
//! 2. [`negotiate`] picks the sub-protocol from the request headers, or gives a [`Refusal`]
//!    to answer with;
//! 3. answer `101 Switching Protocols` with [`upgrade_response_headers`], and once hyper hands
//!    over the upgraded connection, [`accept`] runs SPDY on it and waits for the client's
//!    streams;
//! 4. bridge the [`Session`] to the process (stdin in, stdout/stderr out, resize events), then
//!    [`Session::finish`] with its [`ExitOutcome`].
//!
//! The peer is Go's `moby/spdystream` (client side, inside the apiserver), so the framing
//! follows its reader and writer: header blocks are one zlib stream per direction with the
//! SPDY/3 dictionary, there is no flow control, every accepted stream gets a SYN_REPLY before
//! any data. Only SPDY is handled; WebSocket (`v5.channel.k8s.io` over WebSocket) is not.

#![warn(missing_docs)]

mod dictionary;
#[doc(hidden)]
pub mod frame;
mod negotiate;
mod options;
mod session;
mod status;

pub use negotiate::{
    HEADER_ACCEPTED_PROTOCOL_VERSIONS, HEADER_PROTOCOL_VERSION, Protocol, Refusal, SPDY_31,
    negotiate, upgrade_response_headers,
};
pub use options::{StreamOptions, command_from_query};
pub use session::{
    DEFAULT_STREAM_CREATION_TIMEOUT, OutputSender, PeerGone, Session, SessionStats, Stdin,
    TerminalSize, accept,
};
pub use status::ExitOutcome;

/// Everything that can go wrong in a remotecommand session.
#[derive(Debug, thiserror::Error)]
pub enum RemoteCommandError {
    /// The request asks for none of stdin, stdout, stderr.
    #[error("you must specify at least 1 of stdin, stdout, stderr")]
    NoStreamsRequested,
    /// The client did not create all expected streams in time.
    #[error("timed out waiting for client to create streams (missing: {missing})")]
    StreamCreationTimeout {
        /// The stream types still missing.
        missing: String,
    },
    /// The client closed or broke the connection.
    #[error("the client closed the connection")]
    ConnectionClosed,
    /// The client reset the stream written to.
    #[error("the client reset stream {0}")]
    StreamReset(u32),
    /// The client stopped reading before the final status could be written.
    #[error("timed out writing the final status to the client")]
    FinishTimeout,
    /// The client sent a malformed frame.
    #[error("SPDY framing: {0}")]
    Frame(#[from] frame::FrameError),
}
