//! kube-scheduler's command-line flags, with the same names and meanings
//! (upstream `cmd/kube-scheduler/app/options`): secure serving, delegated
//! authentication and authorization, leader election, logging. Parsing is
//! clap's; this module turns the flags into what `serve` needs, and says
//! which deprecated flags were used.
//!
//! What is served, from the flags:
//!
//! | flags | served |
//! |---|---|
//! | neither `--http-addr` nor `--secure-port` | HTTPS on `--bind-address:10259` |
//! | `--secure-port N` (N > 0) | HTTPS on `--bind-address:N` |
//! | `--secure-port 0` | no HTTPS |
//! | `--http-addr ADDR` (deprecated) | plain HTTP on ADDR, as before, and HTTPS only if `--secure-port` is given too |

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use convoy_config::LeaderElection;

/// kube-scheduler's secure port.
pub const DEFAULT_SECURE_PORT: u16 = 10259;

/// kube-scheduler's `--authorization-always-allow-paths`.
pub const DEFAULT_ALWAYS_ALLOW_PATHS: &str = "/healthz,/readyz,/livez";

/// Log format (`--logging-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// Logging flags; every subcommand takes them.
#[derive(Args, Debug, Clone, Default)]
pub struct LoggingFlags {
    /// Log verbosity as klog's: 0-2 info, 3-4 Convoy's debug detail, 5 and more trace. Used only
    /// when RUST_LOG is not set.
    #[arg(short = 'v', long = "v", global = true, value_name = "LEVEL")]
    pub v: Option<u8>,
    /// Log format [default: text].
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    pub logging_format: Option<LogFormat>,
    /// Deprecated: use --logging-format.
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
}

impl LoggingFlags {
    /// The log format, and the deprecation line to log if the old flag
    /// was used. Both flags given with different values is an error.
    pub fn format(&self) -> Result<(LogFormat, Option<String>), String> {
        match (self.logging_format, self.log_format) {
            (Some(new), Some(old)) if new != old => Err(format!(
                "--log-format={} and --logging-format={} disagree (--log-format is deprecated: \
                 give --logging-format alone)",
                format_name(old),
                format_name(new)
            )),
            (new, Some(old)) => {
                Ok((new.unwrap_or(old), Some(deprecated("--log-format", "--logging-format"))))
            }
            (new, None) => Ok((new.unwrap_or(LogFormat::Text), None)),
        }
    }

    /// The log filter when `RUST_LOG` is not set: from `--v` if given,
    /// else `fallback` (the subcommand's default).
    pub fn filter(&self, fallback: &str) -> String {
        match self.v {
            Some(v) => verbosity_filter(v).to_string(),
            None => fallback.to_string(),
        }
    }
}

fn format_name(f: LogFormat) -> &'static str {
    match f {
        LogFormat::Text => "text",
        LogFormat::Json => "json",
    }
}

/// The tracing filter for klog verbosity `v`: 0-2 everything at info; 3-4
/// Convoy's crates at debug (per-plugin detail); 5 and more Convoy's at
/// trace and the libraries (kube, hyper, rustls) at debug.
pub fn verbosity_filter(v: u8) -> &'static str {
    match v {
        0..=2 => "info",
        3..=4 => "info,convoy=debug",
        _ => "debug,convoy=trace",
    }
}

fn deprecated(old: &str, new: &str) -> String {
    format!("{old} is deprecated and will be removed in the next release: use {new}")
}

/// Serving flags (`/metrics`, `/healthz`, `/livez`, `/readyz`).
#[derive(Args, Debug, Clone)]
pub struct ServingFlags {
    /// Address the secure port listens on (0.0.0.0 or :: for every interface).
    #[arg(long, default_value = "0.0.0.0", value_name = "IP")]
    pub bind_address: IpAddr,
    /// HTTPS port of /metrics, /healthz, /livez and /readyz; 0 turns HTTPS off [default: 10259].
    #[arg(long, value_name = "PORT")]
    pub secure_port: Option<u16>,
    /// PEM certificate (chain) of the secure port; without it a self-signed certificate is made
    /// at start.
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, value_name = "FILE")]
    pub tls_private_key_file: Option<PathBuf>,
    /// Where the self-signed certificate is kept (convoy-scheduler.crt and .key, reused if
    /// present); ignored with --tls-cert-file. Default: in memory only.
    #[arg(long, value_name = "DIR")]
    pub cert_dir: Option<PathBuf>,
    /// Kubeconfig for TokenReviews [default: the scheduler's own kubeconfig or in-cluster].
    #[arg(long, value_name = "FILE")]
    pub authentication_kubeconfig: Option<PathBuf>,
    /// Kubeconfig for SubjectAccessReviews [default: the scheduler's own kubeconfig or
    /// in-cluster].
    #[arg(long, value_name = "FILE")]
    pub authorization_kubeconfig: Option<PathBuf>,
    /// Paths served without authentication or authorization (comma-separated; a trailing `*`
    /// matches a prefix; an empty value: none).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = DEFAULT_ALWAYS_ALLOW_PATHS,
        value_name = "PATHS"
    )]
    pub authorization_always_allow_paths: Vec<String>,
    /// Deprecated: plain HTTP, no authentication, on this address (use --secure-port and
    /// --bind-address).
    #[arg(long, value_name = "ADDR")]
    pub http_addr: Option<SocketAddr>,
}

impl Default for ServingFlags {
    fn default() -> Self {
        Self {
            bind_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            secure_port: None,
            tls_cert_file: None,
            tls_private_key_file: None,
            cert_dir: None,
            authentication_kubeconfig: None,
            authorization_kubeconfig: None,
            authorization_always_allow_paths: split_paths(DEFAULT_ALWAYS_ALLOW_PATHS),
            http_addr: None,
        }
    }
}

fn split_paths(list: &str) -> Vec<String> {
    list.split(',').map(String::from).collect()
}

/// What to serve, from [`ServingFlags`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    /// Plain HTTP without authentication (the deprecated `--http-addr`).
    pub plain: Option<SocketAddr>,
    /// HTTPS with delegated authentication and authorization.
    pub secure: Option<SecureServing>,
}

/// The secure port's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecureServing {
    /// `--bind-address:--secure-port`.
    pub addr: SocketAddr,
    /// Where the certificate comes from.
    pub cert: CertSource,
    /// Kubeconfig for TokenReviews (`None`: the scheduler's own).
    pub authentication_kubeconfig: Option<PathBuf>,
    /// Kubeconfig for SubjectAccessReviews (`None`: the scheduler's own).
    pub authorization_kubeconfig: Option<PathBuf>,
    /// Paths served to anyone (`--authorization-always-allow-paths`).
    pub always_allow_paths: Vec<String>,
}

/// The secure port's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// `--tls-cert-file` and `--tls-private-key-file`.
    Files {
        /// PEM certificate chain, the server's first.
        cert: PathBuf,
        /// PEM private key.
        key: PathBuf,
    },
    /// Self-signed at start; kept in `--cert-dir` if given.
    SelfSigned {
        /// `--cert-dir`.
        dir: Option<PathBuf>,
    },
}

impl ServingFlags {
    /// What to serve, and the deprecation lines to log. Inconsistent flags
    /// are an error naming them.
    pub fn resolve(&self) -> Result<(Serving, Vec<String>), String> {
        let mut notes = Vec::new();
        if let Some(addr) = self.http_addr {
            notes.push(format!(
                "--http-addr is deprecated and will be removed in the next release: it serves \
                 plain HTTP without authentication on {addr}; use --secure-port and \
                 --bind-address (HTTPS, delegated authentication and authorization)"
            ));
        }
        // The old flag alone keeps the old behaviour: no second port that
        // nobody asked for (and that two replicas on one host would share).
        let port = match (self.secure_port, self.http_addr) {
            (Some(port), _) => port,
            (None, Some(_)) => 0,
            (None, None) => DEFAULT_SECURE_PORT,
        };
        let secure = if port == 0 {
            None
        } else {
            let cert = match (&self.tls_cert_file, &self.tls_private_key_file) {
                (Some(cert), Some(key)) => {
                    CertSource::Files { cert: cert.clone(), key: key.clone() }
                }
                (None, None) => CertSource::SelfSigned { dir: self.cert_dir.clone() },
                (Some(_), None) => {
                    return Err("--tls-cert-file needs --tls-private-key-file".to_string());
                }
                (None, Some(_)) => {
                    return Err("--tls-private-key-file needs --tls-cert-file".to_string());
                }
            };
            let mut always_allow_paths = Vec::new();
            for path in &self.authorization_always_allow_paths {
                let path = path.trim();
                if path.is_empty() {
                    continue;
                }
                if !path.starts_with('/') {
                    return Err(format!(
                        "--authorization-always-allow-paths: {path:?} does not start with /"
                    ));
                }
                always_allow_paths.push(path.to_string());
            }
            Some(SecureServing {
                addr: SocketAddr::new(self.bind_address, port),
                cert,
                authentication_kubeconfig: self.authentication_kubeconfig.clone(),
                authorization_kubeconfig: self.authorization_kubeconfig.clone(),
                always_allow_paths,
            })
        };
        Ok((Serving { plain: self.http_addr, secure }, notes))
    }
}

/// kube-scheduler's leader-election flags. Each one given overrides its
/// field of the configuration file's `leaderElection`, as upstream's do.
#[derive(Args, Debug, Clone, Default)]
pub struct LeaderElectionFlags {
    /// Elect a leader before scheduling (overrides leaderElection.leaderElect).
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub leader_elect: Option<bool>,
    /// Overrides leaderElection.leaseDuration (a Go duration such as 15s).
    #[arg(long, value_parser = convoy_config::parse_go_duration, value_name = "DURATION")]
    pub leader_elect_lease_duration: Option<Duration>,
    /// Overrides leaderElection.renewDeadline.
    #[arg(long, value_parser = convoy_config::parse_go_duration, value_name = "DURATION")]
    pub leader_elect_renew_deadline: Option<Duration>,
    /// Overrides leaderElection.retryPeriod.
    #[arg(long, value_parser = convoy_config::parse_go_duration, value_name = "DURATION")]
    pub leader_elect_retry_period: Option<Duration>,
    /// Overrides leaderElection.resourceName (the Lease's name).
    #[arg(long, value_name = "NAME")]
    pub leader_elect_resource_name: Option<String>,
    /// Overrides leaderElection.resourceNamespace (the Lease's namespace).
    #[arg(long, value_name = "NAMESPACE")]
    pub leader_elect_resource_namespace: Option<String>,
}

impl LeaderElectionFlags {
    /// Applies the flags given to `le`, then checks the result as the
    /// configuration loader does, naming the flags.
    pub fn apply(&self, le: &mut LeaderElection) -> Result<(), String> {
        let given = self.leader_elect.is_some()
            || self.leader_elect_lease_duration.is_some()
            || self.leader_elect_renew_deadline.is_some()
            || self.leader_elect_retry_period.is_some()
            || self.leader_elect_resource_name.is_some()
            || self.leader_elect_resource_namespace.is_some();
        if !given {
            return Ok(());
        }
        if let Some(v) = self.leader_elect {
            le.leader_elect = v;
        }
        if let Some(v) = self.leader_elect_lease_duration {
            le.lease_duration = v;
        }
        if let Some(v) = self.leader_elect_renew_deadline {
            le.renew_deadline = v;
        }
        if let Some(v) = self.leader_elect_retry_period {
            le.retry_period = v;
        }
        if let Some(v) = &self.leader_elect_resource_name {
            le.resource_name = v.clone();
        }
        if let Some(v) = &self.leader_elect_resource_namespace {
            le.resource_namespace = v.clone();
        }
        if !le.leader_elect {
            return Ok(());
        }
        let lease = "--leader-elect-lease-duration (leaderElection.leaseDuration)";
        let renew = "--leader-elect-renew-deadline (leaderElection.renewDeadline)";
        let retry = "--leader-elect-retry-period (leaderElection.retryPeriod)";
        for (name, value) in
            [(lease, le.lease_duration), (renew, le.renew_deadline), (retry, le.retry_period)]
        {
            if value.is_zero() {
                return Err(format!("{name} must be greater than zero"));
            }
        }
        let show = convoy_config::format_go_duration;
        if le.lease_duration <= le.renew_deadline {
            return Err(format!(
                "{lease} {} must be greater than {renew} {}",
                show(le.lease_duration),
                show(le.renew_deadline)
            ));
        }
        if le.renew_deadline.as_secs_f64() <= le.retry_period.as_secs_f64() * 1.2 {
            return Err(format!(
                "{renew} {} must be greater than {retry} {} times 1.2 (client-go's jitter)",
                show(le.renew_deadline),
                show(le.retry_period)
            ));
        }
        for (name, value) in [
            ("--leader-elect-resource-name (leaderElection.resourceName)", &le.resource_name),
            (
                "--leader-elect-resource-namespace (leaderElection.resourceNamespace)",
                &le.resource_namespace,
            ),
        ] {
            if value.is_empty() {
                return Err(format!("{name} must not be empty"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        logging: LoggingFlags,
        #[command(flatten)]
        serving: ServingFlags,
        #[command(flatten)]
        election: LeaderElectionFlags,
    }

    fn parse(args: &[&str]) -> Result<Flags, clap::Error> {
        Flags::try_parse_from(std::iter::once("convoy-scheduler").chain(args.iter().copied()))
    }

    fn serving(args: &[&str]) -> Result<(Serving, Vec<String>), String> {
        parse(args).map_err(|e| e.to_string())?.serving.resolve()
    }

    #[test]
    fn verbosity_maps_to_a_filter_as_klog_levels() {
        for (v, want) in [
            (0, "info"),
            (1, "info"),
            (2, "info"),
            (3, "info,convoy=debug"),
            (4, "info,convoy=debug"),
            (5, "debug,convoy=trace"),
            (10, "debug,convoy=trace"),
        ] {
            assert_eq!(verbosity_filter(v), want, "v={v}");
        }
        for (args, fallback, want) in [
            (&[][..], "warn", "warn"),
            (&["-v", "3"][..], "warn", "info,convoy=debug"),
            (&["-v=4"][..], "info", "info,convoy=debug"),
            (&["-v5"][..], "info", "debug,convoy=trace"),
            (&["--v=2"][..], "warn", "info"),
            (&["--v", "0"][..], "warn", "info"),
        ] {
            let flags = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(flags.logging.filter(fallback), want, "{args:?}");
        }
        let err = parse(&["--v=loud"]).err().expect("a bad level").to_string();
        assert!(err.contains("--v <LEVEL>"), "{err}");
    }

    #[test]
    fn log_format_flags_and_the_deprecated_one() {
        let format = |args: &[&str]| parse(args).expect("flags").logging.format();
        assert_eq!(format(&[]), Ok((LogFormat::Text, None)));
        assert_eq!(format(&["--logging-format", "json"]), Ok((LogFormat::Json, None)));
        let (f, note) = format(&["--log-format=json"]).expect("the old flag works");
        assert_eq!(f, LogFormat::Json);
        let note = note.expect("a deprecation line");
        assert!(note.contains("--log-format is deprecated") && note.contains("--logging-format"));
        let (f, note) = format(&["--log-format=json", "--logging-format=json"]).expect("agree");
        assert_eq!(f, LogFormat::Json);
        assert!(note.is_some());
        let err = format(&["--log-format=json", "--logging-format=text"]).expect_err("disagree");
        assert!(
            err.contains("--log-format=json") && err.contains("--logging-format=text"),
            "{err}"
        );
        let err = parse(&["--logging-format=xml"]).err().expect("a bad format").to_string();
        assert!(err.contains("--logging-format"), "{err}");
    }

    #[test]
    fn serving_defaults_to_the_secure_port_on_every_interface() {
        let (s, notes) = serving(&[]).expect("defaults");
        assert!(notes.is_empty());
        assert_eq!(s.plain, None);
        let secure = s.secure.expect("secure serving");
        assert_eq!(secure.addr, "0.0.0.0:10259".parse().unwrap());
        assert_eq!(secure.cert, CertSource::SelfSigned { dir: None });
        assert_eq!(secure.always_allow_paths, ["/healthz", "/readyz", "/livez"]);
        assert_eq!(secure.authentication_kubeconfig, None);
        assert_eq!(secure.authorization_kubeconfig, None);
    }

    #[test]
    fn serving_flags_as_kube_schedulers() {
        let (s, _) = serving(&[
            "--bind-address=127.0.0.1",
            "--secure-port=8443",
            "--tls-cert-file=/c.crt",
            "--tls-private-key-file=/c.key",
            "--authentication-kubeconfig=/authn",
            "--authorization-kubeconfig=/authz",
            "--authorization-always-allow-paths=/healthz,/debug/*",
        ])
        .expect("flags");
        let secure = s.secure.expect("secure serving");
        assert_eq!(secure.addr, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(secure.cert, CertSource::Files { cert: "/c.crt".into(), key: "/c.key".into() });
        assert_eq!(secure.authentication_kubeconfig, Some(PathBuf::from("/authn")));
        assert_eq!(secure.authorization_kubeconfig, Some(PathBuf::from("/authz")));
        assert_eq!(secure.always_allow_paths, ["/healthz", "/debug/*"]);

        let (s, _) = serving(&["--bind-address", "::1", "--cert-dir", "/certs"]).expect("ipv6");
        let secure = s.secure.expect("secure serving");
        assert_eq!(secure.addr, "[::1]:10259".parse().unwrap());
        assert_eq!(secure.cert, CertSource::SelfSigned { dir: Some("/certs".into()) });

        let (s, _) = serving(&["--authorization-always-allow-paths="]).expect("none");
        assert!(s.secure.expect("secure").always_allow_paths.is_empty());
        let (s, _) = serving(&["--secure-port=0"]).expect("off");
        assert_eq!(s, Serving { plain: None, secure: None });
    }

    #[test]
    fn the_deprecated_http_addr_keeps_serving_plain_http_alone() {
        let (s, notes) = serving(&["--http-addr", "127.0.0.1:10251"]).expect("old flag");
        assert_eq!(s.plain, Some("127.0.0.1:10251".parse().unwrap()));
        assert_eq!(s.secure, None, "no secure port nobody asked for");
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("--http-addr is deprecated"), "{}", notes[0]);
        assert!(notes[0].contains("--secure-port"), "{}", notes[0]);

        let (s, notes) =
            serving(&["--http-addr=127.0.0.1:0", "--secure-port=9443"]).expect("both ports");
        assert_eq!(s.plain, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(s.secure.expect("secure").addr, "0.0.0.0:9443".parse().unwrap());
        assert_eq!(notes.len(), 1);
    }

    #[test]
    fn bad_serving_flags_are_named() {
        for (args, want) in [
            (&["--tls-cert-file=/c.crt"][..], "--tls-cert-file needs --tls-private-key-file"),
            (
                &["--tls-private-key-file=/c.key"][..],
                "--tls-private-key-file needs --tls-cert-file",
            ),
            (&["--authorization-always-allow-paths=healthz"][..], "does not start with /"),
            (&["--secure-port=70000"][..], "--secure-port <PORT>"),
            (&["--bind-address=localhost"][..], "--bind-address <IP>"),
            (&["--http-addr=10251"][..], "--http-addr <ADDR>"),
        ] {
            let err = serving(args).expect_err("refused");
            assert!(err.contains(want), "{args:?}: {err} (wanted {want:?})");
        }
    }

    #[test]
    fn leader_election_flags_override_the_config() {
        let flags = parse(&[
            "--leader-elect=false",
            "--leader-elect-lease-duration=30s",
            "--leader-elect-renew-deadline=20s",
            "--leader-elect-retry-period=4s",
            "--leader-elect-resource-name=mine",
            "--leader-elect-resource-namespace=sched",
        ])
        .expect("flags");
        let mut le = LeaderElection::default();
        flags.election.apply(&mut le).expect("valid");
        assert!(!le.leader_elect);
        assert_eq!(
            (le.lease_duration, le.renew_deadline, le.retry_period),
            (Duration::from_secs(30), Duration::from_secs(20), Duration::from_secs(4))
        );
        assert_eq!((le.resource_name.as_str(), le.resource_namespace.as_str()), ("mine", "sched"));

        // A bare --leader-elect is true; no flag leaves the config alone.
        let mut le = LeaderElection { leader_elect: false, ..Default::default() };
        parse(&["--leader-elect"]).expect("flags").election.apply(&mut le).expect("valid");
        assert!(le.leader_elect);
        let before = LeaderElection { lease_duration: Duration::from_secs(99), ..le.clone() };
        let mut after = before.clone();
        parse(&[]).expect("flags").election.apply(&mut after).expect("nothing to do");
        assert_eq!(after, before);
    }

    #[test]
    fn bad_leader_election_flags_are_named() {
        let err = parse(&["--leader-elect-lease-duration=15"]).err().expect("no unit").to_string();
        assert!(err.contains("--leader-elect-lease-duration") && err.contains("unit"), "{err}");
        let err = parse(&["--leader-elect=maybe"]).err().expect("not a bool").to_string();
        assert!(err.contains("--leader-elect"), "{err}");
        for (args, want) in [
            (&["--leader-elect-lease-duration=5s"][..], "--leader-elect-lease-duration"),
            (&["--leader-elect-retry-period=9s"][..], "--leader-elect-retry-period"),
            (&["--leader-elect-renew-deadline=0s"][..], "must be greater than zero"),
            (&["--leader-elect-resource-name="][..], "--leader-elect-resource-name"),
        ] {
            let mut le = LeaderElection::default();
            let err = parse(args).expect("flags").election.apply(&mut le).expect_err("refused");
            assert!(err.contains(want), "{args:?}: {err} (wanted {want:?})");
        }
    }
}
