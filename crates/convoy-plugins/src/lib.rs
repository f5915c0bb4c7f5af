//! Convoy's in-tree scheduling plugins, one module per plugin, with the
//! semantics and reason strings of upstream kube-scheduler
//! (`pkg/scheduler/framework/plugins/*`), so that messages users compare
//! read the same; plus Convoy's own [`GpuPlacement`] (GPU fragmentation and
//! gang topology scoring), registered but enabled only by a profile.
//!
//! Code two plugins need lives in [`helper`] (upstream `plugins/helper`):
//! plugins meet there and never import each other's internals.
//!
//! [`registry`] registers every plugin under its upstream name
//! (`convoy_api::names`). Filter and Score run for hundreds of nodes per pod:
//! plugins precompute what they need in PreFilter/PreScore into the typed
//! `CycleState`, return static reason strings on the Filter rejection path
//! and never clone node objects.
//!
//! May depend on: `convoy-api` (the plugin API), `convoy-config` (plugin
//! args), `k8s-openapi` (object types) and small pure crates. Does no IO
//! besides calling the [`Binder`](convoy_api::Binder) handed to
//! `DefaultBinder` (DefaultPreemption only chooses victims; the scheduler
//! deletes them).

use std::sync::Arc;

use convoy_api::{Plugin, Registry, names};

pub mod default_binder;
pub mod default_preemption;
pub mod dynamic_resources;
pub mod gpu_placement;
pub mod helper;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod scheduling_gates;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

pub use default_binder::DefaultBinder;
pub use default_preemption::DefaultPreemption;
pub use dynamic_resources::DynamicResources;
pub use gpu_placement::GpuPlacement;
pub use image_locality::ImageLocality;
pub use inter_pod_affinity::InterPodAffinity;
pub use node_affinity::NodeAffinity;
pub use node_name::NodeName;
pub use node_ports::NodePorts;
pub use node_resources::{BalancedAllocation, Fit};
pub use node_unschedulable::NodeUnschedulable;
pub use node_volume_limits::NodeVolumeLimits;
pub use pod_topology_spread::PodTopologySpread;
pub use priority_sort::PrioritySort;
pub use scheduling_gates::SchedulingGates;
pub use taint_toleration::TaintToleration;
pub use volume_binding::VolumeBinding;
pub use volume_restrictions::VolumeRestrictions;
pub use volume_zone::VolumeZone;

/// A registry with every in-tree plugin, under its upstream name (and
/// GpuPlacement under its own).
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.register(names::PRIORITY_SORT, |_, _| Ok(Arc::new(PrioritySort) as Arc<dyn Plugin>));
    r.register(names::SCHEDULING_GATES, |_, _| Ok(Arc::new(SchedulingGates) as Arc<dyn Plugin>));
    r.register(
        names::NODE_UNSCHEDULABLE,
        |_, _| Ok(Arc::new(NodeUnschedulable) as Arc<dyn Plugin>),
    );
    r.register(names::NODE_NAME, |_, _| Ok(Arc::new(NodeName) as Arc<dyn Plugin>));
    r.register(names::NODE_PORTS, |_, _| Ok(Arc::new(NodePorts) as Arc<dyn Plugin>));
    r.register(names::NODE_AFFINITY, |args, _| {
        Ok(Arc::new(NodeAffinity::new(args)?) as Arc<dyn Plugin>)
    });
    r.register(names::TAINT_TOLERATION, |_, _| Ok(Arc::new(TaintToleration) as Arc<dyn Plugin>));
    r.register(names::NODE_RESOURCES_FIT, |args, _| {
        Ok(Arc::new(Fit::new(args)?) as Arc<dyn Plugin>)
    });
    r.register(names::INTER_POD_AFFINITY, |args, handle| {
        Ok(Arc::new(InterPodAffinity::new(args, handle.objects.clone())?) as Arc<dyn Plugin>)
    });
    r.register(names::POD_TOPOLOGY_SPREAD, |args, handle| {
        Ok(Arc::new(PodTopologySpread::new(args, handle)?) as Arc<dyn Plugin>)
    });
    r.register(names::VOLUME_RESTRICTIONS, |_, handle| {
        Ok(Arc::new(VolumeRestrictions::new(handle.objects.clone())) as Arc<dyn Plugin>)
    });
    r.register(names::NODE_VOLUME_LIMITS, |_, handle| {
        Ok(Arc::new(NodeVolumeLimits::new(handle.objects.clone())) as Arc<dyn Plugin>)
    });
    r.register(names::VOLUME_BINDING, |args, handle| {
        Ok(Arc::new(VolumeBinding::with_args(args, handle.objects.clone(), handle.binder.clone())?)
            as Arc<dyn Plugin>)
    });
    r.register(names::VOLUME_ZONE, |_, handle| {
        Ok(Arc::new(VolumeZone::new(handle.objects.clone())) as Arc<dyn Plugin>)
    });
    r.register(names::NODE_RESOURCES_BALANCED_ALLOCATION, |args, handle| {
        Ok(Arc::new(BalancedAllocation::new(args)?.following(handle.objects.clone()))
            as Arc<dyn Plugin>)
    });
    r.register(names::IMAGE_LOCALITY, |_, handle| {
        Ok(Arc::new(ImageLocality::following(handle.objects.clone())) as Arc<dyn Plugin>)
    });
    r.register(names::DEFAULT_BINDER, |_, handle| {
        Ok(Arc::new(DefaultBinder::new(handle.binder.clone())) as Arc<dyn Plugin>)
    });
    r.register(names::DEFAULT_PREEMPTION, |args, handle| {
        Ok(Arc::new(DefaultPreemption::new(args, handle)?) as Arc<dyn Plugin>)
    });
    r.register(names::DYNAMIC_RESOURCES, |args, handle| {
        Ok(Arc::new(DynamicResources::with_stats(
            args,
            handle.objects.clone(),
            handle.binder.clone(),
            handle.dra_stats.clone(),
        )?) as Arc<dyn Plugin>)
    });
    r.register(names::GPU_PLACEMENT, |args, _| {
        Ok(Arc::new(GpuPlacement::new(args)?) as Arc<dyn Plugin>)
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_has_every_plugin_under_its_upstream_name() {
        let r = registry();
        let got: Vec<&str> = r.names().collect();
        let mut want = vec![
            names::PRIORITY_SORT,
            names::SCHEDULING_GATES,
            names::NODE_UNSCHEDULABLE,
            names::NODE_NAME,
            names::NODE_PORTS,
            names::NODE_AFFINITY,
            names::TAINT_TOLERATION,
            names::NODE_RESOURCES_FIT,
            names::INTER_POD_AFFINITY,
            names::POD_TOPOLOGY_SPREAD,
            names::VOLUME_RESTRICTIONS,
            names::NODE_VOLUME_LIMITS,
            names::VOLUME_BINDING,
            names::VOLUME_ZONE,
            names::NODE_RESOURCES_BALANCED_ALLOCATION,
            names::IMAGE_LOCALITY,
            names::DEFAULT_BINDER,
            names::DEFAULT_PREEMPTION,
            names::DYNAMIC_RESOURCES,
            names::GPU_PLACEMENT,
        ];
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn gpu_placement_is_registered_but_not_a_default() {
        assert!(registry().get(names::GPU_PLACEMENT).is_some());
        assert!(
            convoy_config::default_multi_point().iter().all(|p| p.name != names::GPU_PLACEMENT)
        );
    }

    #[test]
    fn factories_build_with_default_args_and_names_match() {
        let r = registry();
        let handle = helper::testing::handle();
        for name in r.names() {
            let plugin = (r.get(name).unwrap())(None, &handle).unwrap();
            assert_eq!(plugin.name(), name);
        }
    }
}
