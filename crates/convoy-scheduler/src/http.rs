//! The scheduler's small HTTP server: metrics and health probes, plain
//! HTTP/1.1 (axum on hyper).
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | every [`Metrics`] series, OpenMetrics text; the refresh hook runs first |
//! | `GET /healthz`, `GET /livez` | 200 `ok` while the process serves requests |
//! | `GET /readyz` | 200 `ok` once the initial lists are synced, 503 before |
//!
//! Readiness follows the cache, not leadership: a standby replica with a
//! warm cache is ready (it can take over at once), as upstream, whose
//! `/readyz` does not check the lease either.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE};

/// The body of `/readyz` before the initial lists are synced.
pub const NOT_READY_BODY: &str =
    "not ready: the initial lists of nodes and pods are not synced yet\n";

/// What the handlers read. Cheap to clone (three `Arc`s).
#[derive(Clone)]
pub struct HttpState {
    /// The metrics `/metrics` exports.
    pub metrics: Arc<Metrics>,
    /// True once the initial lists are synced (`/readyz`).
    pub ready: Arc<AtomicBool>,
    /// Runs before each `/metrics` encoding, to copy in state kept
    /// elsewhere (the queue's counts: [`Metrics::sync_queue`]).
    pub refresh: Arc<dyn Fn() + Send + Sync>,
}

impl HttpState {
    /// State with no refresh hook.
    pub fn new(metrics: Arc<Metrics>, ready: Arc<AtomicBool>) -> Self {
        Self { metrics, ready, refresh: Arc::new(|| {}) }
    }

    /// Sets the hook run before each `/metrics` encoding.
    pub fn with_refresh(mut self, refresh: impl Fn() + Send + Sync + 'static) -> Self {
        self.refresh = Arc::new(refresh);
        self
    }
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The routes, for embedding in another server or for `serve`.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Serves on `addr` until `shutdown` completes, then finishes the requests
/// in progress and returns. Fails only if `addr` cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    state: HttpState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz, /livez, /readyz");
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await
}

/// Binds `addr` (port 0 picks a free port) and serves in a spawned task
/// until the task is aborted. Returns the bound address and the task.
pub async fn start(
    addr: SocketAddr,
    state: HttpState,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "serving /metrics, /healthz, /livez, /readyz");
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(state)).await {
            tracing::error!(error = %e, "the metrics and health server stopped");
        }
    });
    Ok((bound, task))
}

async fn metrics(State(s): State<HttpState>) -> Response {
    (s.refresh)();
    let body = s.metrics.encode();
    ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], body).into_response()
}

async fn ok() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<HttpState>) -> (StatusCode, &'static str) {
    if s.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, NOT_READY_BODY)
    }
}
