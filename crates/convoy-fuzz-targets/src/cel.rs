//! DRA device selectors: CEL expressions from DeviceClasses and
//! ResourceClaims.

use std::collections::BTreeMap;

use convoy_plugins::dynamic_resources::cel::{CelDevice, DeviceSelector};
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, DeviceCapacity};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Compiles the input as a selector expression and evaluates it against a
/// few devices (a GPU with attributes of every type and capacities, a device
/// with none). Every evaluation ends (the cost limit bounds its work) with a
/// verdict or an error, and evaluating again gives the same answer: the
/// cost budget starts afresh for each evaluation.
pub fn cel(data: &[u8]) {
    let Ok(expression) = std::str::from_utf8(data) else { return };
    let selector = match DeviceSelector::compile(expression) {
        Ok(selector) => selector,
        Err(e) => {
            let _ = e.len();
            return;
        }
    };
    for device in devices() {
        let first = selector.matches(&device);
        assert_eq!(first, selector.matches(&device), "{expression}: a second evaluation differs");
    }
}

fn devices() -> [CelDevice; 2] {
    let attr = |f: fn(&mut DeviceAttribute)| {
        let mut a = DeviceAttribute::default();
        f(&mut a);
        a
    };
    let attributes: BTreeMap<String, DeviceAttribute> = [
        ("model", attr(|a| a.string = Some("NVIDIA A100-SXM4-80GB".into()))),
        ("index", attr(|a| a.int = Some(3))),
        ("mig", attr(|a| a.bool = Some(true))),
        ("driverVersion", attr(|a| a.version = Some("1.2.3-rc.1+build".into()))),
        ("gpu.example.com/numa", attr(|a| a.int = Some(-1))),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let capacity: BTreeMap<String, DeviceCapacity> = [("memory", "80Gi"), ("cores", "1500m")]
        .into_iter()
        .map(|(k, v)| {
            (k.to_string(), DeviceCapacity { value: Quantity(v.into()), ..Default::default() })
        })
        .collect();
    let gpu = Device {
        name: "gpu-0".into(),
        attributes: Some(attributes),
        capacity: Some(capacity),
        ..Default::default()
    };
    let bare = Device { name: "bare".into(), ..Default::default() };
    [CelDevice::new("gpu.example.com", &gpu), CelDevice::new("other.example.com", &bare)]
}
