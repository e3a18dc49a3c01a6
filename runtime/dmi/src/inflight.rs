//! A cap on the gRPC requests being decoded or answered at once, over every connection.
//!
//! HTTP/2's per-connection limits (streams, windows) still let `connections × streams` requests
//! each buffer a message of up to `maxMessageSize` while it is decoded; this layer holds a
//! request back, before tonic reads its body, until one of `maxRequestsInFlight` permits is
//! free. A request waiting holds nothing but the bytes flow control lets its client send
//! (the stream window). It also counts messages refused for their size: tonic's decoder
//! answers them `OUT_OF_RANGE` from their length prefix, which no handler here returns.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::Semaphore;
use tonic::codegen::http;
use tower::{Layer, Service};

use crate::module::Shared;
use crate::stats::Stats;

/// Wraps the gRPC routes in [`InFlight`].
#[derive(Clone)]
pub(crate) struct InFlightLayer {
    permits: Arc<Semaphore>,
    shared: Arc<Shared>,
}

impl InFlightLayer {
    /// At most `max` requests in flight; refusals counted in `shared`'s stats.
    pub(crate) fn new(max: usize, shared: Arc<Shared>) -> InFlightLayer {
        InFlightLayer {
            permits: Arc::new(Semaphore::new(max.max(1))),
            shared,
        }
    }
}

impl<S> Layer<S> for InFlightLayer {
    type Service = InFlight<S>;

    fn layer(&self, inner: S) -> InFlight<S> {
        InFlight {
            inner,
            permits: self.permits.clone(),
            shared: self.shared.clone(),
        }
    }
}

/// The service behind [`InFlightLayer`].
#[derive(Clone)]
pub(crate) struct InFlight<S> {
    inner: S,
    permits: Arc<Semaphore>,
    shared: Arc<Shared>,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for InFlight<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        // The service polled ready is the one that takes the request; a clone stays behind.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let permits = self.permits.clone();
        let shared = self.shared.clone();
        Box::pin(async move {
            // The semaphore is never closed; should it be, the request goes on unheld.
            let _permit = permits.acquire_owned().await.ok();
            let response = inner.call(request).await?;
            if tonic::Status::from_header_map(response.headers())
                .is_some_and(|s| s.code() == tonic::Code::OutOfRange)
            {
                Stats::bump(&shared.stats.refused_oversized);
                if let Some(skipped) = shared.throttle.allow("oversized message") {
                    tracing::warn!(
                        "DMI request refused: its message is over maxMessageSize \
                         ({skipped} more since the last warning; counted in \
                         wedge_dmi_refused_total{{reason=\"oversized\"}})"
                    );
                }
            }
            Ok(response)
        })
    }
}
