//! Console tables: every column padded to its widest cell, the first `left`
//! columns aligned left (names), the others right (numbers).

use std::fmt::Write as _;

/// The rows (the header first) as lines of text, each ending in a newline.
pub fn format(rows: &[Vec<String>], left: usize) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|v| v.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (v, w))| if c < left { format!("{v:<w$}") } else { format!("{v:>w$}") })
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end()).unwrap();
    }
    out
}

/// Milliseconds with three decimals, `-` for none.
pub fn millis(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn pads_and_aligns() {
        let rows = vec![
            vec!["NAME".to_string(), "PODS/S".to_string()],
            vec!["a/long-name".to_string(), "9.5".to_string()],
        ];
        assert_eq!(super::format(&rows, 1), "NAME         PODS/S\na/long-name     9.5\n");
    }
}
