//! The objects of `gpusAs: draDevices`: a DeviceClass, one node-local
//! ResourceSlice per GPU node, one ResourceClaimTemplate per GPU count, and
//! the claim added to each GPU pod. Plain data, no IO: the driver creates
//! them through its target.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate, ResourceSlice};
use serde_json::{Value, json};

/// The name of a pod's claim entry and of the template's one request.
pub const REQUEST: &str = "gpus";

/// The DeviceClass `driver`: the devices of that driver (CEL
/// `device.driver == "<driver>"`).
pub fn device_class(driver: &str) -> DeviceClass {
    typed(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == {driver:?}")}}]},
    }))
}

/// The GPU count of a node, from its label `label` (`None`: no label, or
/// not a count > 0).
pub fn node_gpus(node: &Node, label: &str) -> Option<u32> {
    let v = node.metadata.labels.as_ref()?.get(label)?;
    v.parse().ok().filter(|&n| n > 0)
}

/// The ResourceSlice of `node`'s `gpus` devices: pool = the node's name,
/// generation 1, one slice in the pool, devices `gpu-0`.. with an `index`
/// attribute.
pub fn slice(node: &str, gpus: u32, driver: &str) -> ResourceSlice {
    let devices: Vec<Value> = (0..gpus)
        .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"index": {"int": i}}}))
        .collect();
    typed(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-{}", driver.replace('.', "-"))},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }))
}

/// The name of the template for `gpus` devices.
pub fn template_name(gpus: u32) -> String {
    format!("gpu-{gpus}")
}

/// The ResourceClaimTemplate `gpu-<gpus>` in `namespace`: one request
/// `gpus` of exactly `gpus` devices of the class `driver`.
pub fn claim_template(namespace: &str, gpus: u32, driver: &str) -> ResourceClaimTemplate {
    typed(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name(gpus), "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{
            "name": REQUEST,
            "exactly": {"deviceClassName": driver, "allocationMode": "ExactCount", "count": gpus},
        }]}}},
    }))
}

/// Makes a rendered pod (JSON) ask for `gpus` devices through a claim made
/// from `gpu-<gpus>`: a `spec.resourceClaims` entry `gpus` and the first
/// container's `resources.claims`. Refuses a pod that requests the
/// extended resource `resource` (it would ask for the GPUs twice).
pub fn add_claim(pod: &mut Value, gpus: u32, resource: &str) -> Result<(), String> {
    let spec = &mut pod["spec"];
    for c in ["initContainers", "containers"] {
        for (i, ctr) in spec[c].as_array().into_iter().flatten().enumerate() {
            for part in ["requests", "limits"] {
                if !ctr["resources"][part][resource].is_null() {
                    return Err(format!(
                        "pod template: spec.{c}[{i}].resources.{part} names {resource}; with \
                         gpusAs: draDevices the GPUs come from a claim"
                    ));
                }
            }
        }
    }
    if gpus == 0 {
        return Ok(());
    }
    let entry = json!({"name": REQUEST, "resourceClaimTemplateName": template_name(gpus)});
    match spec["resourceClaims"].as_array_mut() {
        Some(list) => list.push(entry),
        None => spec["resourceClaims"] = json!([entry]),
    }
    let ctr = spec["containers"]
        .get_mut(0)
        .ok_or("pod template: spec.containers is empty (the GPU claim needs a container)")?;
    let res = &mut ctr["resources"];
    if !res.is_object() {
        *res = json!({});
    }
    match res["claims"].as_array_mut() {
        Some(list) => list.push(json!({"name": REQUEST})),
        None => res["claims"] = json!([{"name": REQUEST}]),
    }
    Ok(())
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    // The literals above are valid objects of their kind.
    serde_json::from_value(v).expect("a well-formed DRA object")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_well_formed() {
        let s = slice("gpu-node-3", 8, "gpu.example.com");
        assert_eq!(s.metadata.name.as_deref(), Some("gpu-node-3-gpu-example-com"));
        assert_eq!(s.spec.node_name.as_deref(), Some("gpu-node-3"));
        assert_eq!(s.spec.pool.name, "gpu-node-3");
        assert_eq!(s.spec.devices.as_ref().map(Vec::len), Some(8));
        let t = claim_template("ns", 4, "gpu.example.com");
        let r = &t
            .spec
            .as_ref()
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .devices
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()[0];
        let e = r.exactly.as_ref().unwrap();
        assert_eq!((e.count, e.allocation_mode.as_deref()), (Some(4), Some("ExactCount")));
        assert_eq!(e.device_class_name, "gpu.example.com");
        let c = device_class("gpu.example.com");
        let sel = &c.spec.as_ref().unwrap().selectors.as_ref().unwrap()[0];
        assert_eq!(sel.cel.as_ref().unwrap().expression, "device.driver == \"gpu.example.com\"");
    }

    #[test]
    fn claims_are_added_and_extended_requests_refused() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}});
        add_claim(&mut pod, 2, "nvidia.com/gpu").unwrap();
        assert_eq!(
            pod["spec"]["resourceClaims"],
            json!([{"name": "gpus", "resourceClaimTemplateName": "gpu-2"}])
        );
        assert_eq!(pod["spec"]["containers"][0]["resources"]["claims"], json!([{"name": "gpus"}]));
        let mut cpu_only = json!({"spec": {"containers": [{"name": "a"}]}});
        add_claim(&mut cpu_only, 0, "nvidia.com/gpu").unwrap();
        assert!(cpu_only["spec"]["resourceClaims"].is_null());
        let mut both = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
        let e = add_claim(&mut both, 1, "nvidia.com/gpu").unwrap_err();
        assert!(e.contains("spec.containers[0].resources.limits names nvidia.com/gpu"), "{e}");
    }
}
