//! Resource plugins (upstream `plugins/noderesources`): NodeResourcesFit
//! ([`Fit`]: filter on free resources, score by a strategy) and
//! NodeResourcesBalancedAllocation ([`BalancedAllocation`]).

pub mod balanced_allocation;
pub mod fit;
pub mod least_allocated;
pub mod most_allocated;
pub mod requested_to_capacity_ratio;
pub mod resource_allocation;

#[cfg(test)]
mod parity;

pub use balanced_allocation::BalancedAllocation;
pub use fit::Fit;

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
