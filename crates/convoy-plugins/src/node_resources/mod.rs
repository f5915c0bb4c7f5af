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
