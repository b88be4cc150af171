//! The signal that a hold's lease may be gone.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;

/// Completes when a hold's lease may be gone; from [`LockGuard::lost`](crate::LockGuard::lost) (or a combined lock's
/// guard, when its holds may be gone).
#[must_use = "futures do nothing unless awaited"]
pub struct Lost(BoxFuture<'static, ()>);

impl Lost {
    /// A `Lost` that completes when `signal` does.
    pub(crate) fn from_future(signal: impl Future<Output = ()> + Send + 'static) -> Lost {
        Lost(Box::pin(signal))
    }
}

impl Future for Lost {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lost")
    }
}
