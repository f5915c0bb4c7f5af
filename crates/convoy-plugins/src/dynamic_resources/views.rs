//! The two views of a node's devices: what its device plugin reports as an
//! extended resource (`status.allocatable[nvidia.com/gpu]`) and what its
//! DRA driver publishes in ResourceSlices. A DeviceClass with
//! `spec.extendedResourceName` says the two name the same devices; when a
//! node has both, their counts should agree, and a difference means one of
//! them is stale (a device turned unhealthy and only one view dropped it).

use std::sync::Arc;

use convoy_api::ObjectLister;

use super::cel::{CelDevice, DeviceSelector};

/// The devices a node publishes in ResourceSlices for one DeviceClass that
/// names an extended resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassDevices {
    /// The class's `spec.extendedResourceName`.
    pub resource: String,
    /// The DeviceClass.
    pub class: String,
    /// The node's devices (in slices whose `spec.nodeName` is the node)
    /// that match every selector of the class.
    pub devices: usize,
}

/// For each DeviceClass whose `extendedResourceName` passes `wanted` (the
/// resources the node reports), the devices `node` publishes for it;
/// classes the node publishes no device of are left out. A selector that
/// fails to compile or to evaluate counts the device out. Cheap when no
/// class is wanted: the slices are read only then.
pub fn class_devices(
    objects: &dyn ObjectLister,
    node: &str,
    wanted: impl Fn(&str) -> bool,
) -> Vec<ClassDevices> {
    let classes: Vec<_> = objects
        .device_classes()
        .into_iter()
        .filter_map(|c| {
            let spec = c.spec.as_ref()?;
            let resource = spec.extended_resource_name.clone().filter(|r| wanted(r))?;
            Some((c.metadata.name.clone().unwrap_or_default(), resource, spec.selectors.clone()))
        })
        .collect();
    if classes.is_empty() {
        return Vec::new();
    }
    let (slices, _) = objects.resource_slices();
    let devices: Vec<CelDevice> = slices
        .iter()
        .filter(|s| s.spec.node_name.as_deref() == Some(node))
        .flat_map(|s| s.spec.devices.iter().flatten().map(|d| CelDevice::new(&s.spec.driver, d)))
        .collect();
    if devices.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (class, resource, selectors) in classes {
        let selectors: Vec<Result<Arc<DeviceSelector>, String>> = selectors
            .iter()
            .flatten()
            .filter_map(|s| s.cel.as_ref())
            .map(|cel| DeviceSelector::compile(&cel.expression).map(Arc::new))
            .collect();
        let count = devices
            .iter()
            .filter(|d| {
                selectors.iter().all(|s| s.as_ref().is_ok_and(|s| s.matches(d) == Ok(true)))
            })
            .count();
        if count > 0 {
            out.push(ClassDevices { resource, class, devices: count });
        }
    }
    out.sort_by(|a, b| (&a.resource, &a.class).cmp(&(&b.resource, &b.class)));
    out
}

#[cfg(test)]
mod tests {
    use convoy_api::ClusterObject;
    use convoy_objects::ClusterObjects;
    use serde_json::json;

    use super::*;

    fn objects(gpus: usize) -> ClusterObjects {
        let o = ClusterObjects::new();
        let class = json!({
            "metadata": {"name": "gpu.example.com"},
            "spec": {"extendedResourceName": "example.com/gpu",
                     "selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}
        });
        o.apply(&ClusterObject::DeviceClass(Arc::new(serde_json::from_value(class).unwrap())));
        let devices: Vec<_> = (0..gpus).map(|i| json!({"name": format!("gpu-{i}")})).collect();
        let slice = json!({
            "metadata": {"name": "n1-gpus"},
            "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                     "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}
        });
        o.apply(&ClusterObject::ResourceSlice(Arc::new(serde_json::from_value(slice).unwrap())));
        o
    }

    #[test]
    fn counts_the_nodes_devices_of_each_class_naming_an_extended_resource() {
        let o = objects(7);
        assert!(class_devices(&o, "n1", |_| false).is_empty(), "not wanted");
        assert_eq!(
            class_devices(&o, "n1", |r| r == "example.com/gpu"),
            vec![ClassDevices {
                resource: "example.com/gpu".into(),
                class: "gpu.example.com".into(),
                devices: 7
            }]
        );
        assert!(class_devices(&o, "n2", |_| true).is_empty(), "another node publishes nothing");
    }
}
