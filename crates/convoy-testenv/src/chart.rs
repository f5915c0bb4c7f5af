//! The Helm chart (`charts/convoy`) as the tests see it: linted and
//! rendered by the `helm` testenv builds beside kube-apiserver, installed
//! piecewise with kubectl, and its ServiceAccount turned into a kubeconfig
//! (a TokenRequest token) so that Convoy runs with the chart's RBAC and
//! nothing more.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::Kubeconfig;
use serde_json::Value;

use crate::{Error, Result, TestEnv, bin_dir, repo_root};

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    repo_root().join("charts/convoy")
}

/// Path of `helm`, built by `testenv/testenv build` if needed.
pub fn helm() -> Result<PathBuf> {
    Ok(bin_dir()?.join("helm"))
}

/// Runs `helm args...` with a private configuration home (no repositories,
/// no plugins of the machine's user); standard output, or an error with
/// what helm printed.
fn run_helm(args: &[&str], values: Option<&str>) -> Result<String> {
    let home = tempfile::Builder::new().prefix("convoy-helm-").tempdir()?;
    let mut cmd = Command::new(helm()?);
    cmd.args(args)
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .stdin(Stdio::null());
    if let Some(values) = values {
        let file = home.path().join("values.yaml");
        std::fs::write(&file, values)?;
        cmd.arg("--values").arg(file);
    }
    let out = cmd.output().map_err(|e| Error::Command {
        command: format!("helm {}", args[0]),
        detail: e.to_string(),
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(Error::Command {
            command: format!("helm {}", args[0]),
            detail: format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(stdout)
}

/// `helm lint --strict` of the chart with the extra `values` (YAML, may be
/// empty): what it printed, or an error when it found a problem.
pub fn lint(values: &str) -> Result<String> {
    let chart = chart_dir();
    run_helm(&["lint", "--strict", &chart.to_string_lossy()], Some(values))
}

/// Checks that the chart refuses the extra `values`: `helm template` fails
/// with an error containing `want` (the field it names), and `helm lint
/// --strict` fails too. What went otherwise, if anything.
pub fn refused(
    release: &str,
    namespace: &str,
    values: &str,
    want: &str,
) -> std::result::Result<(), String> {
    match render(release, namespace, values) {
        Ok(_) => return Err(format!("helm template accepted {values:?}")),
        Err(e) if !e.to_string().contains(want) => {
            return Err(format!("{values:?}: {e} (wanted {want:?})"));
        }
        Err(_) => {}
    }
    if lint(values).is_ok() {
        return Err(format!("helm lint accepted {values:?}"));
    }
    Ok(())
}

/// The chart rendered by `helm template` (CRDs included): the text, and
/// each document as JSON.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// What `helm template` printed.
    pub text: String,
    /// The objects, in the order helm printed them.
    pub objects: Vec<Value>,
}

impl Rendered {
    /// Objects of `kind`.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| o["kind"] == kind)
    }

    /// The one object of `kind` named `name`.
    pub fn get<'a>(&'a self, kind: &'a str, name: &str) -> Option<&'a Value> {
        self.of_kind(kind).find(|o| o["metadata"]["name"] == name)
    }

    /// The objects of the given kinds as one `kind: List`, for `kubectl
    /// apply`.
    pub fn list_of(&self, kinds: &[&str]) -> Value {
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|o| kinds.iter().any(|k| o["kind"] == *k))
            .cloned()
            .collect();
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items})
    }
}

/// `helm template RELEASE charts/convoy --namespace NAMESPACE
/// --include-crds` with the extra `values` (YAML, may be empty).
pub fn render(release: &str, namespace: &str, values: &str) -> Result<Rendered> {
    let chart = chart_dir();
    let text = run_helm(
        &[
            "template",
            release,
            &chart.to_string_lossy(),
            "--namespace",
            namespace,
            "--include-crds",
        ],
        Some(values),
    )?;
    let docs: Vec<Option<Value>> = serde_saphyr::from_multiple(&text)
        .map_err(|e| Error::Chart(format!("parsing helm template's output: {e}")))?;
    Ok(Rendered { text, objects: docs.into_iter().flatten().filter(|d| !d.is_null()).collect() })
}

/// The RBAC kinds of a chart, with its ServiceAccount: what a cluster
/// administrator installs for Convoy besides the Deployment.
pub const RBAC_KINDS: [&str; 5] =
    ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];

impl TestEnv {
    /// `kubectl apply` of `objects` (a `kind: List` or one object, as JSON)
    /// with the admin kubeconfig; the objects' namespaces must exist.
    pub fn apply(&self, objects: &Value) -> Result<()> {
        let file =
            tempfile::Builder::new().prefix("apply-").suffix(".json").tempfile_in(self.dir())?;
        std::fs::write(
            file.path(),
            serde_json::to_vec(objects).map_err(|e| Error::Chart(e.to_string()))?,
        )?;
        self.kubectl(&["apply", "-f", &file.path().to_string_lossy()])?;
        Ok(())
    }

    /// Runs testenv's kubectl with the admin kubeconfig; its output, or an
    /// error with what it printed.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(bin_dir()?.join("kubectl"))
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::Command { command: "kubectl".into(), detail: e.to_string() })?;
        if !out.status.success() {
            return Err(Error::Command {
                command: format!("kubectl {}", args.join(" ")),
                detail: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// A kubeconfig authenticating as ServiceAccount `namespace/name` with a
    /// token from the TokenRequest API (valid one hour), as a pod of that
    /// ServiceAccount would: the admin kubeconfig's server and CA, no other
    /// credential. Written to `<testenv dir>/<name>.kubeconfig`.
    pub async fn service_account_kubeconfig(
        &self,
        admin: &kube::Client,
        namespace: &str,
        name: &str,
    ) -> Result<PathBuf> {
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                // None: the API server's own audience, as a pod's token.
                audiences: None,
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
            .create_token_request(name, &PostParams::default(), &request)
            .await?
            .status
            .and_then(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Error::Chart(format!("no token for ServiceAccount {namespace}/{name}"))
            })?;
        let admin_config = std::fs::read_to_string(self.kubeconfig())?;
        let mut kc: Value =
            serde_saphyr::from_str(&admin_config).map_err(|e| Error::Kubeconfig(e.to_string()))?;
        for context in kc["contexts"].as_array_mut().into_iter().flatten() {
            context["context"]["user"] = name.into();
        }
        kc["users"] = serde_json::json!([{"name": name, "user": {"token": token}}]);
        let path = self.dir().join(format!("{name}.kubeconfig"));
        let json = serde_json::to_vec_pretty(&kc).map_err(|e| Error::Kubeconfig(e.to_string()))?;
        std::fs::write(&path, json)?;
        Ok(path)
    }
}

/// A client from the kubeconfig at `path`, for the current tokio runtime.
pub async fn client_from(path: &Path) -> Result<kube::Client> {
    let kc = Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    Ok(kube::Client::try_from(config)?)
}
