//! DynamicResources (DRA): the structured-parameters device allocator and its CEL selectors.
pub mod allocator;
pub mod cel;
pub mod pools;
