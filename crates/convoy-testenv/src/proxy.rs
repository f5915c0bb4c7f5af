//! A TCP proxy that injects network faults between a client and the API
//! server, for the chaos tests (`docs/reliability.md`).
//!
//! [`FaultProxy`] listens on a free loopback port and forwards every
//! connection to one upstream address, byte for byte: TLS passes through
//! untouched, so a kubeconfig whose `server` names the proxy's port (same
//! host, the serving certificate still matches) works as the original
//! ([`crate::TestEnv::kubeconfig_via`]). Its controls:
//!
//! - [`cut`](FaultProxy::cut): existing connections are closed (FIN both
//!   ways) and new ones are accepted and at once reset, as when the server
//!   is unreachable; until [`heal`](FaultProxy::heal).
//! - [`reset`](FaultProxy::reset): every existing connection is aborted
//!   with an RST (`SO_LINGER` 0), as by a middlebox losing its state; new
//!   connections work.
//! - [`delay`](FaultProxy::delay): each chunk read from either side waits
//!   this long before it is forwarded (latency, not bandwidth).
//! - [`delay_requests`](FaultProxy::delay_requests): the same, for chunks
//!   from the client only (a one-way partition: the client still hears the
//!   server, its requests are held). A held chunk is lost if its
//!   connection ends, or the proxy is dropped, before it is forwarded.
//! - [`heal`](FaultProxy::heal): no cut and no delay.
//!
//! The proxy stops (and drops every connection) when the value is dropped.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How a connection is ended by a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    /// Orderly close (FIN) of both sides.
    Close,
    /// Abort (RST) of both sides.
    Reset,
}

/// State shared by the accept loop, the connections and the controls.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    cut: AtomicBool,
    delay_micros: AtomicU64,
    /// Added to `delay_micros` for chunks from the client.
    request_delay_micros: AtomicU64,
    /// Bumped with each fault that ends existing connections; a connection
    /// ends when the generation passes the one it started under.
    kill: watch::Sender<(u64, Kill)>,
    open: AtomicUsize,
    accepted: AtomicU64,
    refused: AtomicU64,
}

impl Shared {
    fn delay(&self, from_client: bool) -> Duration {
        let extra = if from_client { self.request_delay_micros.load(Ordering::Relaxed) } else { 0 };
        Duration::from_micros(self.delay_micros.load(Ordering::Relaxed).saturating_add(extra))
    }

    fn end_connections(&self, how: Kill) {
        self.kill.send_modify(|(generation, kill)| {
            *generation += 1;
            *kill = how;
        });
    }
}

/// A fault-injecting TCP proxy on loopback; see the [module docs](self).
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on a free loopback port of the current
    /// tokio runtime.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            cut: AtomicBool::new(false),
            delay_micros: AtomicU64::new(0),
            request_delay_micros: AtomicU64::new(0),
            kill: watch::Sender::new((0, Kill::Close)),
            open: AtomicUsize::new(0),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(Self { addr, shared, accept })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address connections are forwarded to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Closes every open connection and refuses (resets) new ones until
    /// [`heal`](Self::heal).
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        self.shared.end_connections(Kill::Close);
    }

    /// Aborts every open connection with an RST; new connections work.
    pub fn reset(&self) {
        self.shared.end_connections(Kill::Reset);
    }

    /// Holds each chunk for `latency` before forwarding it, in both
    /// directions, on open and new connections. Zero removes the delay.
    pub fn delay(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_micros.store(micros, Ordering::SeqCst);
    }

    /// Holds each chunk from the client for `latency` before forwarding
    /// it; the server's chunks pass. Zero removes this delay.
    pub fn delay_requests(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.request_delay_micros.store(micros, Ordering::SeqCst);
    }

    /// Ends a [`cut`](Self::cut) and the delays.
    pub fn heal(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
        self.shared.delay_micros.store(0, Ordering::SeqCst);
        self.shared.request_delay_micros.store(0, Ordering::SeqCst);
    }

    /// Whether the proxy is cut.
    pub fn is_cut(&self) -> bool {
        self.shared.cut.load(Ordering::SeqCst)
    }

    /// Connections being forwarded now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Connections forwarded since the start.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections reset on arrival because the proxy was cut.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared.end_connections(Kill::Reset);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            // Out of file descriptors and the like: try again shortly.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if shared.cut.load(Ordering::SeqCst) {
            shared.refused.fetch_add(1, Ordering::SeqCst);
            abort(&client);
            continue;
        }
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(forward(client, Arc::clone(&shared)));
    }
}

/// Drops `stream` with an RST instead of a FIN.
fn abort(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

async fn forward(client: TcpStream, shared: Arc<Shared>) {
    let mut kill = shared.kill.subscribe();
    let started = kill.borrow_and_update().0;
    let server = tokio::select! {
        s = TcpStream::connect(shared.upstream) => s,
        _ = kill.changed() => {
            abort(&client);
            return;
        }
    };
    let Ok(server) = server else {
        // The upstream is down (an API server restart): the client sees
        // the same refusal it would see without the proxy.
        abort(&client);
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    shared.open.fetch_add(1, Ordering::SeqCst);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let killed = {
        let up = pump(&mut client_read, &mut server_write, &shared, true);
        let down = pump(&mut server_read, &mut client_write, &shared, false);
        tokio::select! {
            _ = async { tokio::join!(up, down) } => None,
            how = killed_after(&mut kill, started) => Some(how),
        }
    };
    shared.open.fetch_sub(1, Ordering::SeqCst);
    if killed == Some(Kill::Reset) {
        // Whole streams again: a dropped write half would send a FIN first.
        for (read, write) in [(client_read, client_write), (server_read, server_write)] {
            if let Ok(stream) = read.reunite(write) {
                abort(&stream);
            }
        }
    }
    // Dropping closes both sockets (FIN, or RST after abort).
}

/// Waits for a fault raised after generation `started`.
async fn killed_after(kill: &mut watch::Receiver<(u64, Kill)>, started: u64) -> Kill {
    loop {
        let (generation, how) = *kill.borrow_and_update();
        if generation > started {
            return how;
        }
        if kill.changed().await.is_err() {
            // The proxy is gone.
            return Kill::Reset;
        }
    }
}

/// Copies one direction until end of stream or an error, holding each
/// chunk for the current delay, then half-closes the other side.
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    shared: &Shared,
    from_client: bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let delay = shared.delay(from_client);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server on loopback; returns its address.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    /// Writes `msg` and reads the echo; the read error if any.
    async fn round_trip(s: &mut TcpStream, msg: &[u8]) -> io::Result<Vec<u8>> {
        s.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await?;
        Ok(got)
    }

    async fn eventually(mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !f() {
            assert!(Instant::now() < deadline, "condition not met in 5 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn forwards_both_ways() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"hello").await.unwrap(), b"hello");
        let big = vec![7u8; 200_000];
        assert_eq!(round_trip(&mut s, &big).await.unwrap(), big);
        assert_eq!(proxy.accepted(), 1);
        assert_eq!(proxy.open_connections(), 1);
        drop(s);
        eventually(|| proxy.open_connections() == 0).await;
    }

    #[tokio::test]
    async fn cut_closes_open_connections_and_refuses_new_ones_until_healed() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        round_trip(&mut s, b"before").await.unwrap();
        proxy.cut();
        assert!(proxy.is_cut());
        // The open connection ends: end of stream (FIN), not an RST.
        let mut buf = [0u8; 8];
        assert_eq!(s.read(&mut buf).await.unwrap(), 0);
        // A new connection is reset before any byte comes back.
        let mut t = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut t, b"during").await.is_err());
        assert_eq!(proxy.refused(), 1);
        proxy.heal();
        let mut u = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut u, b"after").await.unwrap(), b"after");
    }

    #[tokio::test]
    async fn reset_aborts_open_connections_only() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        round_trip(&mut s, b"before").await.unwrap();
        proxy.reset();
        let mut buf = [0u8; 8];
        let err = s.read(&mut buf).await.expect_err("an RST, not a clean end of stream");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
        let mut t = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut t, b"after").await.unwrap(), b"after");
        assert!(!proxy.is_cut());
    }

    #[tokio::test]
    async fn delay_holds_each_chunk_until_healed() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.delay(Duration::from_millis(400));
        let t0 = Instant::now();
        round_trip(&mut s, b"slow").await.unwrap();
        // Held on the way in and on the way back.
        assert!(t0.elapsed() >= Duration::from_millis(800), "{:?}", t0.elapsed());
        proxy.heal();
        let t1 = Instant::now();
        round_trip(&mut s, b"fast").await.unwrap();
        assert!(t1.elapsed() < Duration::from_millis(800), "{:?}", t1.elapsed());
    }

    #[tokio::test]
    async fn delay_requests_holds_only_what_the_client_sends() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.delay_requests(Duration::from_millis(400));
        let t0 = Instant::now();
        round_trip(&mut s, b"slow").await.unwrap();
        // Held on the way in only.
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_millis(800),
            "{took:?}"
        );
        proxy.heal();
        let t1 = Instant::now();
        round_trip(&mut s, b"fast").await.unwrap();
        assert!(t1.elapsed() < Duration::from_millis(400), "{:?}", t1.elapsed());
    }

    #[tokio::test]
    async fn upstream_down_resets_the_client() {
        // A port with nothing listening: bind, take the address, close.
        let dead = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
        let proxy = FaultProxy::start(dead).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut s, b"x").await.is_err());
        eventually(|| proxy.open_connections() == 0).await;
    }

    #[tokio::test]
    async fn dropping_the_proxy_ends_its_connections() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        round_trip(&mut s, b"x").await.unwrap();
        drop(proxy);
        let mut buf = [0u8; 1];
        assert!(!matches!(s.read(&mut buf).await, Ok(n) if n > 0));
    }
}
