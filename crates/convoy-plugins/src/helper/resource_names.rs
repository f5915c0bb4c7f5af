//! Resource-name classes (upstream `v1helper.IsExtendedResourceName` and
//! `IsScalarResourceName`, v1.37.2), shared by NodeResourcesFit and
//! NodeResourcesBalancedAllocation (which resources they check and score)
//! and GpuPlacement (its args must name extended resources).

/// Upstream `IsPrefixedNativeResource`: a name in the `kubernetes.io/` namespace.
fn is_prefixed_native(name: &str) -> bool {
    name.contains("kubernetes.io/")
}

/// Upstream `IsExtendedResourceName` (without the qualified-name syntax
/// check, which API validation already did): a `domain/name` outside
/// `kubernetes.io/` and not a quota `requests.` name.
pub fn is_extended_resource_name(name: &str) -> bool {
    name.contains('/') && !is_prefixed_native(name) && !name.starts_with("requests.")
}

/// Upstream `IsScalarResourceName`: extended, hugepages, prefixed native or
/// attachable-volume resources.
pub fn is_scalar_resource_name(name: &str) -> bool {
    is_extended_resource_name(name)
        || name.starts_with("hugepages-")
        || is_prefixed_native(name)
        || name.starts_with("attachable-volumes-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_name_classes() {
        let cases = [
            ("cpu", false, false),
            ("memory", false, false),
            ("nvidia.com/gpu", true, true),
            ("example.com/foo", true, true),
            ("kubernetes.io/something", false, true),
            ("hugepages-2Mi", false, true),
            ("attachable-volumes-aws-ebs", false, true),
            ("requests.example.com/foo", false, false),
        ];
        for (name, extended, scalar) in cases {
            assert_eq!(is_extended_resource_name(name), extended, "{name}");
            assert_eq!(is_scalar_resource_name(name), scalar, "{name}");
        }
    }
}
