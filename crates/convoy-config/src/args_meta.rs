//! The `apiVersion` and `kind` fields every plugin args type may carry, checked while the
//! args are decoded. Shared by the in-tree args ([`crate::args`]) and Convoy's own
//! (`gpu_args`), so neither imports the other.

use serde::Deserialize;
use serde::de::{self, Deserializer};

/// `apiVersion` that plugin args may carry.
const ARGS_API_VERSION: &str = "kubescheduler.config.k8s.io/v1";

/// Decodes a string field and refuses any value but `want`; `field` names it in the message.
pub(crate) fn expect_str<'de, D: Deserializer<'de>>(
    d: D,
    field: &str,
    want: &str,
) -> Result<(), D::Error> {
    let got = String::deserialize(d)?;
    if got == want {
        Ok(())
    } else {
        Err(de::Error::custom(format!("{field} must be {want:?}, got {got:?}")))
    }
}

/// Decodes an args type's `apiVersion`, which must be [`ARGS_API_VERSION`].
pub(crate) fn api_version<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_str(d, "apiVersion", ARGS_API_VERSION)
}
