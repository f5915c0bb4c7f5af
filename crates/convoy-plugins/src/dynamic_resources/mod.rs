//! DynamicResources: Dynamic Resource Allocation (DRA) for the scheduler.

pub mod cel;
