//! Fixtures shared by the adapter's API-server tests.

#![allow(dead_code)]

pub mod forwarder;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;

/// A ready node with a little capacity.
pub fn node(name: &str) -> Node {
    let mut allocatable = BTreeMap::new();
    allocatable.insert("cpu".to_string(), Quantity("4".into()));
    allocatable.insert("pods".to_string(), Quantity("110".into()));
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "status": { "allocatable": allocatable, "capacity": allocatable }
    }))
    .expect("valid node")
}

/// An unassigned pod for Convoy, with env and a probe that trimming drops.
pub fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(PodSpec {
            scheduler_name: Some("convoy-scheduler".into()),
            containers: vec![Container {
                name: "main".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                env: Some(vec![k8s_openapi::api::core::v1::EnvVar {
                    name: "A".into(),
                    value: Some("1".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Polls `check` every 100 ms until it returns `Some` or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A client holding a TokenRequest token of the chart's ServiceAccount
/// `name` in a new namespace `namespace`, the chart's RBAC (as `helm
/// template` renders it) applied.
pub async fn chart_client(
    env: &convoy_testenv::TestEnv,
    name: &str,
    namespace: &str,
) -> anyhow::Result<kube::Client> {
    let admin = env.client().await?;
    env.create_namespace(&admin, namespace).await?;
    let rendered = convoy_testenv::chart::render(name, namespace, "")?;
    env.apply(&rendered.list_of(&convoy_testenv::chart::RBAC_KINDS))?;
    let kubeconfig = env.service_account_kubeconfig(&admin, namespace, name).await?;
    Ok(convoy_testenv::chart::client_from(&kubeconfig).await?)
}
