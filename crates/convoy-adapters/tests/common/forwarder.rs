//! A TCP forwarder in front of the API server that a test can cut, to make
//! the API server unreachable for one client without touching the others.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use convoy_testenv::TestEnv;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the forwarder does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Forward,
    /// Close every connection, open or new (the client sees resets and
    /// EOFs: fast failures).
    Refuse,
    /// Keep connections open but move no bytes (the client's requests hang).
    BlackHole,
}

/// Listens on a loopback port and forwards to the API server of a
/// [`TestEnv`] while in [`Mode::Forward`].
pub struct Forwarder {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    task: JoinHandle<()>,
}

impl Forwarder {
    /// Starts forwarding to `env`'s API server.
    pub async fn start(env: &TestEnv) -> Result<Self> {
        let config = env_config(env).await?;
        let host = config.cluster_url.host().context("API server host")?.to_string();
        let port = config.cluster_url.port_u16().context("API server port")?;
        let upstream: SocketAddr = format!("{host}:{port}").parse()?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(Mode::Forward);
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else { continue };
                tokio::spawn(connection(inbound, upstream, mode_rx.clone()));
            }
        });
        Ok(Self { addr, mode, task })
    }

    /// A client for the API server that goes through this forwarder.
    pub async fn client(&self, env: &TestEnv) -> Result<kube::Client> {
        let mut config = env_config(env).await?;
        config.cluster_url = format!("https://{}", self.addr).parse()?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Switches what happens to open and new connections.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.set(Mode::Refuse);
        self.task.abort();
    }
}

async fn env_config(env: &TestEnv) -> Result<kube::Config> {
    let kc = Kubeconfig::read_from(env.kubeconfig())?;
    Ok(kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
}

/// One client connection: forwarded while the mode is `Forward`, closed
/// on `Refuse`, frozen on `BlackHole` until the mode changes again.
async fn connection(mut inbound: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    let held = *mode.borrow_and_update();
    match held {
        Mode::Forward => {}
        Mode::Refuse => return,
        Mode::BlackHole => {
            let _ = mode.wait_for(|m| *m != Mode::BlackHole).await;
            return;
        }
    }
    let Ok(mut outbound) = TcpStream::connect(upstream).await else { return };
    let frozen = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => false,
        cut = mode.wait_for(|m| *m != Mode::Forward) => cut.is_ok_and(|m| *m == Mode::BlackHole),
    };
    if frozen {
        // Hold both ends without reading or writing.
        let _ = mode.wait_for(|m| *m != Mode::BlackHole).await;
    }
}
