//! NodePorts: rejects nodes where a host port the pod asks for is already in
//! use (upstream `plugins/nodeports`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use convoy_api::{
    ActionType, ClusterEventWithHint, CycleState, EventObject, EventResource, FilterPlugin,
    HostPort, NodeInfo, NodeInfoLister, Plugin, PodInfo, PreFilterPlugin, PreFilterResult,
    QueueingHint, Status, names,
};

use crate::helper::{event_pod, pod_was_on_a_node};

/// Reason when a requested host port is taken.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// The NodePorts plugin.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodePorts;

/// PreFilter state: the host ports the pod wants.
struct PreFilterState(Vec<HostPort>);

/// Whether none of `want` conflicts with a port in use on the node.
pub fn fits_ports(want: &[HostPort], node: &NodeInfo) -> bool {
    !want.iter().any(|w| node.used_ports.iter().any(|u| u.conflicts(w)))
}

/// The host ports of a pod object, as `PodInfo` computes them.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    pod.spec.as_ref().map(convoy_api::pod_info::host_ports).unwrap_or_default()
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        names::NODE_PORTS
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            // Ports are immutable: only a deletion can free one.
            ClusterEventWithHint::with_hint(
                EventResource::AssignedPod,
                ActionType::DELETE,
                is_schedulable_after_pod_deleted,
            ),
            ClusterEventWithHint::new(EventResource::Node, ActionType::ADD),
        ]
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for NodePorts {
    /// Skip when the pod asks for no host port.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        if pod.host_ports.is_empty() {
            return (None, Status::skip());
        }
        state.write(PreFilterState(pod.host_ports.clone()));
        (None, Status::success())
    }
}

impl FilterPlugin for NodePorts {
    /// Unschedulable `node(s) didn't have free ports for the requested pod ports`.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let want = state.read::<PreFilterState>().map_or(&pod.host_ports[..], |s| &s.0[..]);
        if fits_ports(want, node) { Status::success() } else { Status::unschedulable(ERR_REASON) }
    }
}

/// Queue when the deleted pod was on a node and used a port that conflicts
/// with one the rejected pod wants.
fn is_schedulable_after_pod_deleted(
    pod: &PodInfo,
    old: Option<&EventObject>,
    _new: Option<&EventObject>,
) -> QueueingHint {
    let Some(deleted) = event_pod(old) else { return QueueingHint::Queue };
    if !pod_was_on_a_node(deleted) {
        return QueueingHint::Skip;
    }
    let freed = host_ports(deleted);
    if freed.iter().any(|f| pod.host_ports.iter().any(|w| w.conflicts(f))) {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

#[cfg(test)]
mod tests {
    use convoy_api::Code;
    use convoy_api::testing::{NodeBuilder, PodBuilder};
    use k8s_openapi::api::core::v1::ContainerPort;

    use super::*;
    use crate::helper::testing::pod_obj;

    /// A pod with host ports given as (protocol, ip, port).
    fn pod_with_ports(name: &str, ports: &[(&str, &str, i32)]) -> PodBuilder {
        let ports: Vec<ContainerPort> = ports
            .iter()
            .map(|(proto, ip, port)| ContainerPort {
                container_port: *port,
                host_port: Some(*port),
                host_ip: (!ip.is_empty()).then(|| ip.to_string()),
                protocol: Some(proto.to_string()),
                ..Default::default()
            })
            .collect();
        PodBuilder::new(name).with_spec(move |s| s.containers[0].ports = Some(ports))
    }

    fn node_with(existing: PodBuilder) -> NodeInfo {
        let mut n = NodeBuilder::new("n").info();
        n.add_pod(existing.node("n").info());
        n
    }

    /// As upstream's `GetHostPorts`: a sidecar holds its host ports for the
    /// pod's life, a plain init container has exited and holds none.
    #[test]
    fn only_sidecar_init_containers_hold_host_ports() {
        let init = |name: &str, sidecar: bool| {
            serde_json::from_value(serde_json::json!({
                "name": name,
                "restartPolicy": if sidecar { Some("Always") } else { None },
                "ports": [{"containerPort": 9000, "hostPort": 9000}]
            }))
            .unwrap()
        };
        let pod = PodBuilder::new("p")
            .with_spec(|s| {
                s.init_containers = Some(vec![init("setup", false), init("proxy", true)])
            })
            .build();
        let ports = host_ports(&pod);
        assert_eq!(ports.len(), 1, "{ports:?}");
        assert_eq!(ports[0].port, 9000);
        let plain =
            PodBuilder::new("q").with_spec(|s| s.init_containers = Some(vec![init("i", false)]));
        assert!(plain.info().host_ports.is_empty());
    }

    #[test]
    fn skip_without_host_ports() {
        let (_, s) = NodePorts.pre_filter(
            &mut CycleState::new(),
            &PodBuilder::new("p").info(),
            &convoy_api::NodeList::default(),
        );
        assert!(s.is_skip());
    }

    #[test]
    fn conflicts() {
        let cases = [
            ("no ports in use", &[("TCP", "", 8080)][..], &[][..], true),
            ("same port, same protocol", &[("TCP", "", 8080)], &[("TCP", "", 8080)], false),
            ("other port", &[("TCP", "", 8080)], &[("TCP", "", 8081)], true),
            ("different protocols", &[("UDP", "", 8080)], &[("TCP", "", 8080)], true),
            (
                "0.0.0.0 wanted vs specific IP",
                &[("TCP", "", 8080)],
                &[("TCP", "127.0.0.1", 8080)],
                false,
            ),
            (
                "specific IP wanted vs 0.0.0.0",
                &[("TCP", "127.0.0.1", 8080)],
                &[("TCP", "0.0.0.0", 8080)],
                false,
            ),
            (
                "two different IPs",
                &[("TCP", "127.0.0.1", 8080)],
                &[("TCP", "127.0.0.2", 8080)],
                true,
            ),
            ("same specific IP", &[("TCP", "10.0.0.1", 8080)], &[("TCP", "10.0.0.1", 8080)], false),
            ("SCTP vs UDP", &[("SCTP", "", 53)], &[("UDP", "", 53)], true),
            (
                "one of several conflicts",
                &[("UDP", "", 53), ("TCP", "", 80)],
                &[("TCP", "", 80)],
                false,
            ),
        ];
        for (name, want, used, fits) in cases {
            let pod = pod_with_ports("p", want).info();
            let node = node_with(pod_with_ports("other", used));
            let mut state = CycleState::new();
            let (_, pre) = NodePorts.pre_filter(&mut state, &pod, &convoy_api::NodeList::default());
            assert!(pre.is_success(), "{name}");
            let s = NodePorts.filter(&state, &pod, &node);
            if fits {
                assert!(s.is_success(), "{name}");
            } else {
                assert_eq!(s.code(), Code::Unschedulable, "{name}");
                assert_eq!(s.message(), ERR_REASON, "{name}");
            }
        }
    }

    #[test]
    fn hint_on_pod_deleted() {
        let pod = pod_with_ports("p", &[("TCP", "", 8080)]).info();
        let cases = [
            (
                "assigned, conflicting port",
                pod_with_ports("d", &[("TCP", "", 8080)]).node("n"),
                QueueingHint::Queue,
            ),
            (
                "assigned, other port",
                pod_with_ports("d", &[("TCP", "", 9090)]).node("n"),
                QueueingHint::Skip,
            ),
            ("assigned, no port", PodBuilder::new("d").node("n"), QueueingHint::Skip),
            ("unassigned", pod_with_ports("d", &[("TCP", "", 8080)]), QueueingHint::Skip),
        ];
        for (name, deleted, want) in cases {
            let got = is_schedulable_after_pod_deleted(&pod, Some(&pod_obj(deleted.build())), None);
            assert_eq!(got, want, "{name}");
        }
    }
}
