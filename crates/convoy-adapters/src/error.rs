//! The adapter's error type.

use kube::config::{InferConfigError, KubeconfigError};

/// Why setting up or talking to the API server failed.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// The kubeconfig file given could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// What went wrong.
        #[source]
        source: KubeconfigError,
    },
    /// Neither an in-cluster config nor a default kubeconfig was found.
    #[error("no API server configuration (in-cluster or kubeconfig): {0}")]
    Infer(#[from] InferConfigError),
    /// A leader-election setting is out of range.
    #[error("leaderElection.{field}: {message}")]
    InvalidLeaderElection {
        /// The setting, as named in the scheduler configuration.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// An API call or building the client failed.
    #[error("API server: {0}")]
    Kube(#[from] kube::Error),
}

/// Result alias for this crate.
pub type Result<T, E = AdapterError> = std::result::Result<T, E>;
