//! Preemption's API calls, as upstream's executor makes them (v1.37.2,
//! `framework/preemption/executor.go`): for each victim a status patch
//! adding `DisruptionTarget=True` (reason `PreemptionByScheduler`), then a
//! DELETE with the pod's own grace period, then a `Preempted` Event; and
//! the preemptor's `status.nominatedNodeName`.
//!
//! A victim already gone (404) counts as preempted; a victim recreated
//! under the same name (another UID) is left alone: both requests carry
//! the UID as a precondition.

use std::sync::Arc;

use convoy_api::PodInfo;
use convoy_api::preemption::{
    DISRUPTION_TARGET, PreemptionActuator, PreemptionError, REASON_PREEMPTION_BY_SCHEDULER,
    disruption_message, group_disruption_message,
};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;

use crate::status::StatusWriter;

/// The [`PreemptionActuator`] of a real cluster. Cheap to clone.
#[derive(Clone)]
pub struct ApiActuator {
    client: kube::Client,
    events: Option<StatusWriter>,
}

impl std::fmt::Debug for ApiActuator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiActuator").finish_non_exhaustive()
    }
}

impl ApiActuator {
    /// An actuator using `client`; `events` (when given) writes the
    /// `Preempted` Events.
    pub fn new(client: kube::Client, events: Option<StatusWriter>) -> Self {
        Self { client, events }
    }
}

/// Whether an error is the API server's 404 (the pod is gone) or 409 with
/// a failed UID precondition (another pod under that name).
fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 409)
}

fn failed(what: &str, pod: &PodInfo, e: kube::Error) -> PreemptionError {
    PreemptionError(format!("{what} {}: {e}", pod.key))
}

/// Who preempts: a pod on a node, or a pod group (through one member).
enum By {
    Pod(Arc<str>),
    Group(Arc<str>),
}

impl ApiActuator {
    /// The condition, the DELETE and the Event of one victim.
    fn run(
        &self,
        victim: Arc<PodInfo>,
        preemptor: Arc<PodInfo>,
        by: By,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        let this = self.clone();
        let message = match &by {
            By::Pod(_) => disruption_message(preemptor.scheduler_name()),
            By::Group(_) => group_disruption_message(preemptor.scheduler_name()),
        };
        Box::pin(async move {
            let pods: Api<Pod> = Api::namespaced(this.client.clone(), victim.namespace());
            let mut condition = json!({
                "type": DISRUPTION_TARGET,
                "status": "True",
                "reason": REASON_PREEMPTION_BY_SCHEDULER,
                "message": message,
                "lastTransitionTime": Time(Timestamp::now()),
            });
            if let Some(g) = victim.pod.metadata.generation {
                condition["observedGeneration"] = json!(g);
            }
            let patch = json!({
                "metadata": { "uid": &*victim.uid },
                "status": { "conditions": [condition] },
            });
            let name = &*victim.key.name;
            match pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch)).await {
                Ok(_) => {}
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(failed("adding DisruptionTarget to", &victim, e)),
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(victim.uid.to_string()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match pods.delete(name, &params).await {
                Ok(_) => {}
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(failed("deleting", &victim, e)),
            }
            match (&by, &this.events) {
                (By::Pod(node), events) => {
                    tracing::info!(
                        preemptor = %preemptor.key, victim = %victim.key, node = %node,
                        "preemptor preempted victim"
                    );
                    if let Some(events) = events {
                        let (v, p) = (&victim, &preemptor);
                        events.preempted(&v.key, &v.uid, &p.key, &p.uid, node);
                    }
                }
                (By::Group(group_uid), events) => {
                    tracing::info!(
                        member = %preemptor.key, victim = %victim.key,
                        "pod group preempted victim"
                    );
                    if let Some(events) = events {
                        let (v, p) = (&victim, &preemptor);
                        events.preempted_by_group(&v.key, &v.uid, &p.key, &p.uid, group_uid);
                    }
                }
            }
            Ok(())
        })
    }
}

impl PreemptionActuator for ApiActuator {
    fn preempt(
        &self,
        victim: Arc<PodInfo>,
        preemptor: Arc<PodInfo>,
        node: Arc<str>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        self.run(victim, preemptor, By::Pod(node))
    }

    fn preempt_for_group(
        &self,
        victim: Arc<PodInfo>,
        member: Arc<PodInfo>,
        group_uid: Arc<str>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        self.run(victim, member, By::Group(group_uid))
    }

    fn set_nominated_node_name(
        &self,
        pod: Arc<PodInfo>,
        node: Option<Arc<str>>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        let client = self.client.clone();
        Box::pin(async move {
            let pods: Api<Pod> = Api::namespaced(client, pod.namespace());
            let patch = json!({
                "metadata": { "uid": &*pod.uid },
                "status": { "nominatedNodeName": node.as_deref() },
            });
            match pods
                .patch_status(&pod.key.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => Ok(()),
                Err(e) if gone(&e) => Ok(()),
                Err(e) => Err(failed("writing status.nominatedNodeName of", &pod, e)),
            }
        })
    }
}
