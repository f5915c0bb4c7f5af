//! The scheduler's small HTTP server: metrics and health probes, HTTP/1.1
//! (axum on hyper), in plain HTTP ([`start`], the deprecated `--http-addr`)
//! or HTTPS behind delegated authentication and authorization
//! ([`start_secure`], `--secure-port`, see [`crate::auth`]).
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
//!
//! Every connection has [`HEADER_READ_TIMEOUT`] to send its request's
//! headers (and on the secure port [`HANDSHAKE_TIMEOUT`] for its TLS
//! handshake), and every request [`REQUEST_TIMEOUT`] to be answered
//! (504 after that), reviews with the API server included.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::auth::Gate;
use crate::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE};

/// The body of `/readyz` before the initial lists are synced.
pub const NOT_READY_BODY: &str =
    "not ready: the initial lists of nodes and pods are not synced yet\n";

/// How long a connection has to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take to be answered.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the handlers read. Cheap to clone (a few `Arc`s).
#[derive(Clone)]
pub struct HttpState {
    /// The metrics `/metrics` exports.
    pub metrics: Arc<Metrics>,
    /// True once the initial lists are synced (`/readyz`).
    pub ready: Arc<AtomicBool>,
    /// Runs before each `/metrics` encoding, to copy in state kept
    /// elsewhere (the queue's counts: [`Metrics::sync_queue`]).
    pub refresh: Arc<dyn Fn() + Send + Sync>,
    /// How long an encoded `/metrics` body is reused (zero: never).
    reuse: Duration,
    /// The last body and when it was encoded.
    last: Arc<Mutex<Option<(Instant, Bytes)>>>,
}

impl HttpState {
    /// State with no refresh hook, encoding `/metrics` at every request.
    pub fn new(metrics: Arc<Metrics>, ready: Arc<AtomicBool>) -> Self {
        Self {
            metrics,
            ready,
            refresh: Arc::new(|| {}),
            reuse: Duration::ZERO,
            last: Arc::new(Mutex::new(None)),
        }
    }

    /// Sets the hook run before each `/metrics` encoding.
    pub fn with_refresh(mut self, refresh: impl Fn() + Send + Sync + 'static) -> Self {
        self.refresh = Arc::new(refresh);
        self
    }

    /// Reuses an encoded `/metrics` body for `reuse`: however many
    /// scrapers there are, the refresh hook (which takes the queue's lock)
    /// and the encoding run at most once per `reuse`.
    pub fn reusing_metrics_for(mut self, reuse: Duration) -> Self {
        self.reuse = reuse;
        self
    }

    fn metrics_body(&self) -> Bytes {
        let encode = || {
            (self.refresh)();
            Bytes::from(self.metrics.encode())
        };
        if self.reuse.is_zero() {
            return encode();
        }
        // Concurrent scrapes wait for one encoding rather than each doing
        // their own.
        let mut last = self.last.lock();
        let now = Instant::now();
        if let Some((at, body)) = &*last
            && now.duration_since(*at) < self.reuse
        {
            return body.clone();
        }
        let body = encode();
        *last = Some((now, body.clone()));
        body
    }
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .field("reuse", &self.reuse)
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

/// The routes of the secure port: every request (unknown paths included)
/// through `gate`, all within [`REQUEST_TIMEOUT`].
pub fn secure_router(state: HttpState, gate: Arc<Gate>) -> Router {
    router(state)
        .layer(axum::middleware::from_fn_with_state(gate, crate::auth::middleware))
        .layer(axum::middleware::from_fn(timeout))
}

/// Serves plain HTTP on `addr` until `shutdown` completes, then finishes
/// the requests in progress and returns. Fails only if `addr` cannot be
/// bound.
pub async fn serve(
    addr: SocketAddr,
    state: HttpState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz, /livez, /readyz");
    let app = router(state).layer(axum::middleware::from_fn(timeout));
    serve_connections(listener, app, None, shutdown).await;
    Ok(())
}

/// Binds `addr` (port 0 picks a free port) and serves plain HTTP in a
/// spawned task until the task is aborted. Returns the bound address and
/// the task.
pub async fn start(
    addr: SocketAddr,
    state: HttpState,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "serving /metrics, /healthz, /livez, /readyz (plain HTTP)");
    let app = router(state).layer(axum::middleware::from_fn(timeout));
    let task = tokio::spawn(serve_connections(listener, app, None, std::future::pending()));
    Ok((bound, task))
}

/// [`start`] on the secure port: HTTPS with `tls`, every request through
/// `gate`.
pub async fn start_secure(
    addr: SocketAddr,
    state: HttpState,
    tls: Arc<rustls::ServerConfig>,
    gate: Arc<Gate>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "serving /metrics, /healthz, /livez, /readyz (HTTPS)");
    let app = secure_router(state, gate);
    let acceptor = Some(TlsAcceptor::from(tls));
    let task = tokio::spawn(serve_connections(listener, app, acceptor, std::future::pending()));
    Ok((bound, task))
}

/// Accepts connections until `shutdown`, each served in a task of its own
/// (after its TLS handshake, with `tls`); then lets the connections finish
/// the requests they are answering.
async fn serve_connections(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: wait rather than spin.
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(app.clone());
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
            let served = match tls {
                None => watcher.watch(http.serve_connection(TokioIo::new(stream), service)).await,
                Some(tls) => {
                    let stream =
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                            Ok(Ok(stream)) => stream,
                            Ok(Err(e)) => {
                                tracing::debug!(error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!("TLS handshake timed out");
                                return;
                            }
                        };
                    watcher.watch(http.serve_connection(TokioIo::new(stream), service)).await
                }
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Answers 504 to a request not answered within [`REQUEST_TIMEOUT`].
async fn timeout(request: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (StatusCode::GATEWAY_TIMEOUT, "request timed out\n").into_response(),
    }
}

async fn metrics(State(s): State<HttpState>) -> Response {
    let body = s.metrics_body();
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn a_metrics_body_is_reused_for_its_time_only() {
        let refreshes = Arc::new(AtomicUsize::new(0));
        let state = {
            let refreshes = refreshes.clone();
            HttpState::new(Arc::new(Metrics::new()), Arc::new(AtomicBool::new(true))).with_refresh(
                move || {
                    refreshes.fetch_add(1, Ordering::Relaxed);
                },
            )
        };
        state.metrics_body();
        state.metrics_body();
        assert_eq!(refreshes.load(Ordering::Relaxed), 2, "no reuse by default");
        let state = state.reusing_metrics_for(Duration::from_millis(200));
        let first = state.metrics_body();
        assert_eq!(state.metrics_body(), first);
        assert_eq!(refreshes.load(Ordering::Relaxed), 3);
        std::thread::sleep(Duration::from_millis(250));
        state.metrics_body();
        assert_eq!(refreshes.load(Ordering::Relaxed), 4);
    }
}
