//! Building the [`kube::Client`]: where the configuration comes from, and a
//! client-side rate limit as client-go's (`--kube-api-qps`/`--kube-api-burst`).
//!
//! kube-rs has no QPS/burst limiter of its own. [`RateLimitLayer`] is a
//! token bucket in front of the client's HTTP service; `Client::new` puts a
//! single `tower::buffer::Buffer` in front of that service, so one bucket
//! limits every clone of the client, as client-go's limiter does per
//! `rest.Config`. Every request takes one token, long-running watches
//! included (client-go does the same).

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::time::{Instant, Sleep};
use tower_layer::Layer;
use tower_service::Service;

use crate::error::{AdapterError, Result};
use crate::fence::Fence;
use crate::rate::TokenBucket;

/// Connects to the API server.
///
/// With `kubeconfig`, that file (its current context). Without, the
/// in-cluster configuration (service account), falling back to what
/// [`kube::Config::infer`] finds (`KUBECONFIG`, then `~/.kube/config`).
///
/// `qps` and `burst` set the client-side token bucket shared by every clone
/// of the returned client; `qps <= 0` disables it (kube-scheduler's
/// defaults are 50 and 100).
pub async fn connect(kubeconfig: Option<&Path>, qps: f32, burst: u32) -> Result<kube::Client> {
    connect_fenced(kubeconfig, qps, burst, None).await
}

/// [`connect`], with every request of the client guarded by `fence` when
/// one is given (see [`crate::fence`]): once it is raised, the client
/// sends nothing more and abandons what it was sending.
pub async fn connect_fenced(
    kubeconfig: Option<&Path>,
    qps: f32,
    burst: u32,
    fence: Option<&Fence>,
) -> Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let err =
                |source| AdapterError::Kubeconfig { path: path.display().to_string(), source };
            let kc = Kubeconfig::read_from(path).map_err(err)?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(err)?
        }
        None => match kube::Config::incluster() {
            Ok(config) => config,
            Err(e) => {
                tracing::debug!(error = %e, "no in-cluster config, trying kubeconfig");
                kube::Config::infer().await?
            }
        },
    };
    let builder = ClientBuilder::try_from(config)?;
    // The fence is the outermost layer: a request still waiting for a
    // token when it is raised is refused too.
    Ok(match (RateLimitLayer::new(qps, burst), fence) {
        (Some(rate), Some(fence)) => builder.with_layer(&rate).with_layer(&fence.layer()).build(),
        (Some(rate), None) => builder.with_layer(&rate).build(),
        (None, Some(fence)) => builder.with_layer(&fence.layer()).build(),
        (None, None) => builder.build(),
    })
}

/// A tower layer limiting requests with a token bucket (`qps` per second,
/// up to `burst` at once).
#[derive(Debug, Clone, Copy)]
pub struct RateLimitLayer {
    qps: f32,
    burst: u32,
}

impl RateLimitLayer {
    /// The layer, or `None` when `qps <= 0` (no limit).
    pub fn new(qps: f32, burst: u32) -> Option<Self> {
        (qps > 0.0 && qps.is_finite()).then_some(Self { qps, burst })
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: TokenBucket::new(self.qps, self.burst, Instant::now()),
            sleep: None,
            ready: false,
        }
    }
}

/// The service [`RateLimitLayer`] builds: `poll_ready` is pending until a
/// token is available, then until the inner service is ready.
#[derive(Debug)]
pub struct RateLimit<S> {
    inner: S,
    bucket: TokenBucket,
    sleep: Option<Pin<Box<Sleep>>>,
    /// A token was taken for the next `call`.
    ready: bool,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.ready {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            match self.bucket.try_take(Instant::now()) {
                Ok(()) => self.ready = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.ready = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::{Ready, ready};
    use std::time::Duration;

    use super::*;

    struct Echo;

    impl Service<u32> for Echo {
        type Response = u32;
        type Error = Infallible;
        type Future = Ready<Result<u32, Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: u32) -> Self::Future {
            ready(Ok(req))
        }
    }

    async fn call(svc: &mut RateLimit<Echo>, req: u32) -> u32 {
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
        svc.call(req).await.unwrap()
    }

    #[test]
    fn non_positive_qps_disables() {
        assert!(RateLimitLayer::new(0.0, 10).is_none());
        assert!(RateLimitLayer::new(-1.0, 10).is_none());
        assert!(RateLimitLayer::new(f32::NAN, 10).is_none());
        assert!(RateLimitLayer::new(5.0, 10).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn burst_passes_then_qps() {
        let mut svc = RateLimitLayer::new(10.0, 5).unwrap().layer(Echo);
        let t0 = Instant::now();
        for i in 0..5 {
            assert_eq!(call(&mut svc, i).await, i);
        }
        assert_eq!(t0.elapsed(), Duration::ZERO, "burst is immediate");
        for i in 0..10 {
            call(&mut svc, i).await;
        }
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(999) && took < Duration::from_millis(1100),
            "{took:?}"
        );
    }
}
