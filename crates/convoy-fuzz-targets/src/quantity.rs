//! Kubernetes quantities, as node capacities, pod requests and plugin args
//! give them.

use convoy_api::resource::{parse_milli, parse_value};

/// Parses the input as a quantity, in thousandths and in whole units. Both
/// parses agree on whether it is valid; when it is, the units are the
/// thousandths rounded up (upstream `Value`), and the thousandths written
/// back as `<n>m` parse to the same amount.
pub fn quantity(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match (parse_milli(text), parse_value(text)) {
        (Ok(milli), Ok(value)) => {
            let ceil = (i128::from(milli) + 999).div_euclid(1000);
            assert_eq!(
                i128::from(value),
                ceil,
                "{text:?}: units are not the thousandths rounded up"
            );
            let written = format!("{milli}m");
            assert_eq!(parse_milli(&written), Ok(milli), "{text:?} written as {written:?}");
        }
        (Err(e), Err(_)) => {
            let _ = e.to_string();
        }
        (milli, value) => panic!("{text:?}: parse_milli gave {milli:?}, parse_value {value:?}"),
    }
}
