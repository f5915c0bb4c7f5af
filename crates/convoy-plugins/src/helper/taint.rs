//! Taint and toleration matching shared by the plugins that look at node
//! taints (upstream `plugins/helper/taint.go` and `v1.Toleration.ToleratesTaint`,
//! v1.37.2): TaintToleration (Filter and Score), NodeUnschedulable (whether
//! the pod tolerates the `unschedulable` taint) and PodTopologySpread (with
//! `nodeTaintsPolicy: Honor`, which nodes count).

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Taint effect `NoSchedule`.
pub const NO_SCHEDULE: &str = "NoSchedule";
/// Taint effect `PreferNoSchedule`.
pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
/// Taint effect `NoExecute`.
pub const NO_EXECUTE: &str = "NoExecute";

/// Upstream `Toleration.ToleratesTaint`: an empty effect matches every
/// effect, an empty key (with `Exists`) every key; operator `Equal` (or
/// empty) compares values, `Exists` ignores them, `Lt`/`Gt` compare decimal
/// integers (`taint < toleration`, `taint > toleration`).
pub fn tolerates_taint(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    let tv = t.value.as_deref().unwrap_or("");
    let nv = taint.value.as_deref().unwrap_or("");
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => tv == nv,
        "Exists" => true,
        op @ ("Lt" | "Gt") => match (decimal_integer(tv), decimal_integer(nv)) {
            (Some(tv), Some(nv)) => {
                if op == "Lt" {
                    nv < tv
                } else {
                    nv > tv
                }
            }
            _ => false,
        },
        _ => false,
    }
}

/// A decimal integer without leading zeros or sign `+` (upstream
/// `IsDecimalInteger`), as i64.
fn decimal_integer(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let ok = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && s != "-0";
    if ok { s.parse().ok() } else { None }
}

/// Upstream `TolerationsTolerateTaint`: whether any toleration tolerates the taint.
pub fn tolerations_tolerate_taint(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates_taint(t, taint))
}

/// Upstream `FindMatchingUntoleratedTaint` with `DoNotScheduleTaintsFilterFunc`:
/// the first NoSchedule or NoExecute taint not tolerated.
pub fn find_untolerated_no_schedule_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints.iter().find(|taint| {
        (taint.effect == NO_SCHEDULE || taint.effect == NO_EXECUTE)
            && !tolerations_tolerate_taint(tolerations, taint)
    })
}

/// Toleration and taint fixtures for the tests of the plugins that match them.
#[cfg(test)]
pub(crate) mod testing {
    use k8s_openapi::api::core::v1::{Taint, Toleration};

    /// A toleration; empty strings are unset fields.
    pub(crate) fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let s = |v: &str| (!v.is_empty()).then(|| v.to_string());
        Toleration {
            key: s(key),
            operator: s(op),
            value: s(value),
            effect: s(effect),
            ..Default::default()
        }
    }

    /// A taint; an empty value is unset.
    pub(crate) fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.to_string(),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect: effect.to_string(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{taint, tol};
    use super::*;

    #[test]
    fn toleration_matching() {
        let cases = [
            (
                "equal matches",
                tol("k", "Equal", "v", "NoSchedule"),
                taint("k", "v", "NoSchedule"),
                true,
            ),
            (
                "empty operator is Equal",
                tol("k", "", "v", "NoSchedule"),
                taint("k", "v", "NoSchedule"),
                true,
            ),
            (
                "equal, other value",
                tol("k", "Equal", "v", "NoSchedule"),
                taint("k", "w", "NoSchedule"),
                false,
            ),
            (
                "exists ignores value",
                tol("k", "Exists", "", "NoSchedule"),
                taint("k", "w", "NoSchedule"),
                true,
            ),
            ("other key", tol("k", "Exists", "", ""), taint("j", "", "NoSchedule"), false),
            (
                "empty key + Exists matches all",
                tol("", "Exists", "", ""),
                taint("any", "x", "NoExecute"),
                true,
            ),
            (
                "empty effect matches all effects",
                tol("k", "Exists", "", ""),
                taint("k", "", "NoExecute"),
                true,
            ),
            (
                "other effect",
                tol("k", "Exists", "", "NoSchedule"),
                taint("k", "", "NoExecute"),
                false,
            ),
            ("unknown operator", tol("k", "Foo", "v", ""), taint("k", "v", "NoSchedule"), false),
            ("Lt: taint below", tol("k", "Lt", "950", ""), taint("k", "900", "NoSchedule"), true),
            ("Lt: taint above", tol("k", "Lt", "950", ""), taint("k", "990", "NoSchedule"), false),
            ("Gt: taint above", tol("k", "Gt", "10", ""), taint("k", "11", "NoSchedule"), true),
            (
                "Gt: equal is not greater",
                tol("k", "Gt", "10", ""),
                taint("k", "10", "NoSchedule"),
                false,
            ),
            (
                "Gt: leading zero invalid",
                tol("k", "Gt", "10", ""),
                taint("k", "011", "NoSchedule"),
                false,
            ),
            ("Gt: not a number", tol("k", "Gt", "10", ""), taint("k", "x", "NoSchedule"), false),
        ];
        for (name, t, taint, want) in cases {
            assert_eq!(tolerates_taint(&t, &taint), want, "{name}");
        }
    }
}
