//! End to end, the secure port as kube-scheduler's: HTTPS with a
//! self-signed certificate made at start, bearer tokens reviewed by a real
//! kube-apiserver (TokenReview), and `/metrics` authorized by it
//! (SubjectAccessReview on the non-resource URL). Two ServiceAccounts:
//! `scraper`, bound to a ClusterRole allowing `get` on `/metrics`, and
//! `stranger`, bound to nothing. The probes' paths answer anyone.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "monitoring";

/// Accepts any server certificate: the secure port's is self-signed. The
/// signatures are still checked, so that the handshake is a real one.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One `GET path` over HTTPS, with `token` as a bearer token if given:
/// the status and the body.
async fn get_tls(addr: SocketAddr, path: &str, token: Option<&str>) -> Result<(u16, String)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let fetch = async {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let mut tls = connector.connect(ServerName::try_from("localhost")?, tcp).await?;
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
        tls.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        // The server may end the TLS session without close_notify.
        let _ = tls.read_to_end(&mut raw).await;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).context("no status")?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        anyhow::Ok((code, body))
    };
    tokio::time::timeout(Duration::from_secs(15), fetch).await.context("no answer in 15 s")?
}

/// A token of ServiceAccount `name` (TokenRequest, the API server's audience).
async fn token(cp: &ControlPlane, name: &str) -> Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(cp.client.clone(), NS);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    accounts.create(&PostParams::default(), &sa).await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }),
        ..Default::default()
    };
    let answer = accounts.create_token_request(name, &PostParams::default(), &request).await?;
    answer.status.and_then(|s| s.token).context("no token in the TokenRequest")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_port_authenticates_and_authorizes_with_the_api_server() -> Result<()> {
    let cp = ControlPlane::start().await?;
    cp.env.create_namespace(&cp.client, NS).await?;
    let scraper = token(&cp, "scraper").await?;
    let stranger = token(&cp, "stranger").await?;
    // What a Prometheus ServiceAccount is given (docs/operating.md).
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "convoy-metrics-reader"},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    }))?;
    Api::<ClusterRole>::all(cp.client.clone()).create(&PostParams::default(), &role).await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "convoy-metrics-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "convoy-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": NS}]
    }))?;
    Api::<ClusterRoleBinding>::all(cp.client.clone())
        .create(&PostParams::default(), &binding)
        .await?;

    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let secure: SocketAddr = ([127, 0, 0, 1], port).into();
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1\n\
                kind: KubeSchedulerConfiguration\n\
                leaderElection:\n  leaderElect: false\n";
    let port_arg = port.to_string();
    // The harness adds the deprecated --http-addr (its readiness probe is
    // plain HTTP): with --secure-port given too, both are served.
    let mut sched = Scheduler::start_with_options(
        &cp.env,
        "convoy-0",
        yaml,
        &["--secure-port", &port_arg, "--bind-address", "127.0.0.1"],
        "info",
    )?;
    sched.wait_ready(Duration::from_secs(60)).await?;

    let (code, body) = get_tls(secure, "/metrics", Some(&scraper)).await?;
    ensure!(code == 200, "scraper: {code} {body}{}", sched.tail());
    ensure!(body.contains("convoy_status_writes_dropped_total"), "scraper's /metrics: {body}");
    // Cached for 10 s, and still right.
    let (code, _) = get_tls(secure, "/metrics", Some(&scraper)).await?;
    ensure!(code == 200, "scraper again: {code}");

    let (code, body) = get_tls(secure, "/metrics", Some(&stranger)).await?;
    ensure!(code == 403, "stranger: {code} {body}");
    ensure!(
        body.contains("system:serviceaccount:monitoring:stranger") && body.contains("/metrics"),
        "stranger's refusal: {body}"
    );
    // No token: system:anonymous, which RBAC does not let read /metrics.
    let (code, body) = get_tls(secure, "/metrics", None).await?;
    ensure!(code == 403, "anonymous: {code} {body}");
    ensure!(body.contains("system:anonymous"), "anonymous refusal: {body}");
    // A token the API server does not know.
    let (code, body) = get_tls(secure, "/metrics", Some("not-a-token")).await?;
    ensure!(code == 401, "unknown token: {code} {body}");

    for path in ["/healthz", "/readyz", "/livez"] {
        let (code, body) = get_tls(secure, path, None).await?;
        ensure!((code, body.as_str()) == (200, "ok"), "{path}: {code} {body}");
    }
    let log = sched.log();
    ensure!(log.contains("--http-addr is deprecated"), "no deprecation line{}", sched.tail());
    ensure!(sched.running(), "convoy-0 exited{}", sched.tail());
    Ok(())
}
