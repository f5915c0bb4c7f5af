//! TEMPORARY stand-in for the DRA CEL evaluator, written so that the
//! allocator can be built and tested before the real `cel.rs` lands (the
//! lead replaces this file at merge). It has the real module's API but
//! understands only expressions of the form `device.driver == "<name>"`;
//! anything else fails to compile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::resource::v1::Device;

/// A device as CEL selectors see it (TEMPORARY: only its driver).
#[derive(Debug, Clone)]
pub struct CelDevice {
    driver: String,
}

impl CelDevice {
    /// The CEL view of `device`, published by `driver`.
    pub fn new(driver: &str, _device: &Device) -> Self {
        Self { driver: driver.to_string() }
    }
}

/// A compiled selector (TEMPORARY: `device.driver == "<name>"` only).
#[derive(Debug)]
pub struct DeviceSelector {
    expr: String,
    driver: String,
}

impl DeviceSelector {
    /// Compiles `expr`.
    pub fn compile(expr: &str) -> Result<Self, String> {
        let rest = expr.trim().strip_prefix("device.driver").map(str::trim_start);
        let lit = rest.and_then(|r| r.strip_prefix("==")).map(str::trim);
        match lit.and_then(|l| l.strip_prefix('"')).and_then(|l| l.strip_suffix('"')) {
            Some(d) if !d.contains('"') => {
                Ok(Self { expr: expr.to_string(), driver: d.to_string() })
            }
            _ => Err(format!("unsupported expression {expr:?} (temporary CEL stand-in)")),
        }
    }

    /// Whether the device matches.
    pub fn matches(&self, d: &CelDevice) -> Result<bool, String> {
        Ok(d.driver == self.driver)
    }

    /// The source expression.
    pub fn expression(&self) -> &str {
        &self.expr
    }
}

/// Compiled selectors by expression.
#[derive(Debug, Default)]
pub struct SelectorCache {
    compiled: Mutex<HashMap<String, Arc<DeviceSelector>>>,
}

impl SelectorCache {
    /// The compiled selector for `expr`, compiling it on first use.
    pub fn get(&self, expr: &str) -> Result<Arc<DeviceSelector>, String> {
        if let Some(s) = self.compiled.lock().unwrap_or_else(|e| e.into_inner()).get(expr) {
            return Ok(s.clone());
        }
        let s = Arc::new(DeviceSelector::compile(expr)?);
        self.compiled.lock().unwrap_or_else(|e| e.into_inner()).insert(expr.to_string(), s.clone());
        Ok(s)
    }
}
