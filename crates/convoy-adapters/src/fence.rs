//! Fencing a replica that lost its lease: a [`Fence`] is raised once, and
//! from then on the client it guards ([`FenceLayer`]) sends nothing and
//! abandons what it was sending.
//!
//! The Kubernetes API has no fencing tokens: a write carries nothing the
//! API server could compare with the Lease. So the replica fences itself,
//! at its edge. The scheduler stops starting writes when it sees the loss
//! (`Scheduler::fence`); the fence makes that hold for every request of the
//! guarded client at once, bindings, victim deletions, claim and
//! nomination writes, retries included, and cuts the ones in flight: their
//! futures end with [`Fenced`] and their connections are dropped. Nothing
//! this process sends leaves it after the moment of loss, which comes
//! `leaseDuration - renewDeadline` before a standby may take over.
//!
//! What no client can recall: bytes of a request that left the process
//! before the loss and are still on the network (a partition that heals
//! later may deliver them). Bindings' UID precondition and `spec.nodeName`
//! being set once keep such a late request from moving a pod.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::watch;
use tower_layer::Layer;
use tower_service::Service;

/// The error of a request cut by a raised [`Fence`].
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("this replica lost its lease: the request was not sent, or was abandoned in flight")]
pub struct Fenced;

/// A one-way switch shared by a [`FenceLayer`] and whoever watches the
/// lease: cheap to clone, raised once, never lowered.
#[derive(Debug, Clone)]
pub struct Fence(Arc<watch::Sender<bool>>);

impl Default for Fence {
    fn default() -> Self {
        Self::new()
    }
}

impl Fence {
    /// A fence not raised.
    pub fn new() -> Self {
        Self(Arc::new(watch::Sender::new(false)))
    }

    /// Raises the fence: every request of the guarded client fails from
    /// now on, those in flight included.
    pub fn raise(&self) {
        self.0.send_replace(true);
    }

    /// Whether the fence is raised.
    pub fn is_raised(&self) -> bool {
        *self.0.borrow()
    }

    /// The layer that guards a client with this fence.
    pub fn layer(&self) -> FenceLayer {
        FenceLayer(self.clone())
    }
}

/// A tower layer failing every request once its [`Fence`] is raised.
#[derive(Debug, Clone)]
pub struct FenceLayer(Fence);

impl<S> Layer<S> for FenceLayer {
    type Service = FenceService<S>;

    fn layer(&self, inner: S) -> FenceService<S> {
        FenceService { inner, fence: self.0.clone() }
    }
}

/// The service [`FenceLayer`] builds.
#[derive(Debug, Clone)]
pub struct FenceService<S> {
    inner: S,
    fence: Fence,
}

/// The boxed error of a [`FenceService`] (kube's client takes any error
/// that converts into it).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, R> Service<R> for FenceService<S>
where
    S: Service<R>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: R) -> Self::Future {
        let mut raised = self.fence.0.subscribe();
        if *raised.borrow() {
            return Box::pin(std::future::ready(Err(Fenced.into())));
        }
        let response = self.inner.call(req);
        Box::pin(async move {
            tokio::select! {
                biased;
                _ = raised.wait_for(|r| *r) => Err(Fenced.into()),
                r = response => r.map_err(Into::into),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::time::Duration;

    use super::*;

    /// Answers after `delay`.
    #[derive(Clone)]
    struct Slow(Duration);

    impl Service<u32> for Slow {
        type Response = u32;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<u32, Infallible>> + Send>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: u32) -> Self::Future {
            let delay = self.0;
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                Ok(req)
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn passes_until_raised_then_cuts_what_is_in_flight_and_refuses_the_rest() {
        let fence = Fence::new();
        let mut svc = fence.layer().layer(Slow(Duration::from_secs(10)));
        assert_eq!(svc.call(1).await.unwrap(), 1);

        let in_flight = tokio::spawn(svc.call(2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let t0 = tokio::time::Instant::now();
        fence.raise();
        let cut = in_flight.await.unwrap();
        assert!(cut.unwrap_err().is::<Fenced>());
        assert_eq!(t0.elapsed(), Duration::ZERO, "cut at once, not after the 10 s answer");

        assert!(fence.is_raised());
        assert!(svc.call(3).await.unwrap_err().is::<Fenced>());
    }
}
