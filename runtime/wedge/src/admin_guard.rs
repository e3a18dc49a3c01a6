//! Keeps an admin connection marked busy until its answer is fully written: the guard rides in
//! the response body, which hyper drops only after the last byte went out (or the client left).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use wedge_core::conn_slots::BusyGuard;

/// A response body that holds a [`BusyGuard`] until hyper drops it.
pub struct Guarded {
    inner: Body,
    _guard: BusyGuard,
}

impl Guarded {
    /// `inner`, keeping `guard` alive as long as the body.
    pub fn new(inner: Body, guard: BusyGuard) -> Guarded {
        Guarded {
            inner,
            _guard: guard,
        }
    }
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
