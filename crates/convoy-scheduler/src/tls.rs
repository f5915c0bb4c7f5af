//! The secure port's certificate: the files of `--tls-cert-file` and
//! `--tls-private-key-file`, or, as kube-scheduler, a self-signed
//! certificate made at start (kept in `--cert-dir` when given, and reused
//! from there on the next start).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::options::CertSource;

/// File names of the self-signed pair in `--cert-dir` (upstream's are
/// `kube-scheduler.crt` and `.key`).
pub const PAIR_NAME: &str = "convoy-scheduler";

/// Why the secure port has no certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{flag} {}", path.display())]
    Io {
        /// The flag that names the file (or its directory).
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A file is not what it should hold.
    #[error("{flag} {}: {message}", path.display())]
    Pem {
        /// The flag that names the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// rustls refused the pair (a key that does not match the certificate).
    #[error("--tls-cert-file and --tls-private-key-file: {0}")]
    Pair(rustls::Error),
    /// The self-signed certificate could not be made.
    #[error("making a self-signed certificate")]
    Generate(#[from] rcgen::Error),
}

/// A certificate chain and its key.
#[derive(Debug)]
pub struct Pair {
    /// The chain, the server's certificate first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The private key.
    pub key: PrivateKeyDer<'static>,
}

/// The pair of `source`, read or made; the second value says where it
/// came from, for the log.
pub fn load(source: &CertSource) -> Result<(Pair, String), TlsError> {
    match source {
        CertSource::Files { cert, key } => Ok((
            read_pair(cert, key, "--tls-cert-file", "--tls-private-key-file")?,
            format!("certificate {}", cert.display()),
        )),
        CertSource::SelfSigned { dir: None } => {
            let (pair, _, _) = self_signed()?;
            Ok((pair, "a self-signed certificate, in memory".to_string()))
        }
        CertSource::SelfSigned { dir: Some(dir) } => {
            let cert = dir.join(format!("{PAIR_NAME}.crt"));
            let key = dir.join(format!("{PAIR_NAME}.key"));
            if cert.exists() && key.exists() {
                let pair = read_pair(&cert, &key, "--cert-dir", "--cert-dir")?;
                return Ok((pair, format!("the self-signed certificate {}", cert.display())));
            }
            let (pair, cert_pem, key_pem) = self_signed()?;
            let io = |path: &Path| {
                let path = path.to_path_buf();
                move |source| TlsError::Io { flag: "--cert-dir", path, source }
            };
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            std::fs::write(&cert, cert_pem).map_err(io(&cert))?;
            write_private(&key, key_pem.as_bytes()).map_err(io(&key))?;
            Ok((pair, format!("a new self-signed certificate, written to {}", cert.display())))
        }
    }
}

/// The rustls configuration of the secure port: TLS 1.2 and 1.3 (ring, as
/// the API client), HTTP/1.1, no client certificates.
pub fn server_config(pair: Pair) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Pair)?
        .with_no_client_auth()
        .with_single_cert(pair.chain, pair.key)
        .map_err(TlsError::Pair)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read_pair(
    cert: &Path,
    key: &Path,
    cert_flag: &'static str,
    key_flag: &'static str,
) -> Result<Pair, TlsError> {
    let read = |flag, path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Io { flag, path: path.into(), source })
    };
    let pem =
        |flag, path: &Path, message: String| TlsError::Pem { flag, path: path.into(), message };
    let chain = CertificateDer::pem_slice_iter(&read(cert_flag, cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(cert_flag, cert, format!("not a PEM certificate: {e}")))?;
    if chain.is_empty() {
        return Err(pem(cert_flag, cert, "no CERTIFICATE block".to_string()));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(key_flag, key)?)
        .map_err(|e| pem(key_flag, key, format!("not a PEM private key: {e}")))?;
    Ok(Pair { chain, key })
}

/// A self-signed certificate for `localhost`, `127.0.0.1` and the host's
/// name, as upstream's: the pair, the certificate's PEM and the key's.
fn self_signed() -> Result<(Pair, String, String), TlsError> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if let Ok(host) = std::fs::read_to_string("/etc/hostname") {
        let host = host.trim();
        if !host.is_empty() && host != "localhost" {
            names.push(host.to_string());
        }
    }
    let mut params = rcgen::CertificateParams::new(names)?;
    params.distinguished_name.push(rcgen::DnType::CommonName, PAIR_NAME);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let pair = Pair {
        chain: vec![cert.der().clone()],
        key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
    };
    Ok((pair, cert.pem(), key.serialize_pem()))
}

/// Writes a private key readable by its owner alone.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_pair_is_kept_in_the_cert_dir_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = CertSource::SelfSigned { dir: Some(dir.path().join("certs")) };
        let (first, from) = load(&source).expect("made");
        assert!(from.contains("new self-signed"), "{from}");
        let (again, from) = load(&source).expect("read back");
        assert!(from.contains("the self-signed certificate"), "{from}");
        assert_eq!(first.chain, again.chain);
        server_config(again).expect("a usable pair");
        let files = CertSource::Files {
            cert: dir.path().join("certs/convoy-scheduler.crt"),
            key: dir.path().join("certs/convoy-scheduler.key"),
        };
        let (pair, _) = load(&files).expect("the same files by flag");
        server_config(pair).expect("a usable pair");
    }

    #[test]
    fn bad_files_name_the_flag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not pem").expect("write");
        let (pair, _) = load(&CertSource::SelfSigned { dir: None }).expect("made");
        let (_, cert_pem, key_pem) = self_signed().expect("made");
        let cert = dir.path().join("c.crt");
        let key = dir.path().join("c.key");
        std::fs::write(&cert, cert_pem).expect("write");
        std::fs::write(&key, key_pem).expect("write");
        drop(pair);
        for (cert, key, want) in [
            (dir.path().join("missing.crt"), key.clone(), "--tls-cert-file"),
            (junk.clone(), key.clone(), "--tls-cert-file"),
            (cert.clone(), junk.clone(), "--tls-private-key-file"),
            (cert.clone(), dir.path().join("missing.key"), "--tls-private-key-file"),
        ] {
            let err = load(&CertSource::Files { cert, key }).expect_err("refused").to_string();
            assert!(err.starts_with(want), "{err} (wanted {want})");
        }
        // A key of another certificate.
        let (_, _, other_key) = self_signed().expect("made");
        std::fs::write(&key, other_key).expect("write");
        let (pair, _) = load(&CertSource::Files { cert, key }).expect("both parse");
        let err = server_config(pair).expect_err("mismatch").to_string();
        assert!(err.contains("--tls-cert-file and --tls-private-key-file"), "{err}");
    }
}
