//! Merges the PTX modules of the device units into one module per architecture, so that the
//! library, `host cubin` and the PTX checks see one text, as if the crate had been compiled once.
//!
//! Every unit is the same crate compiled with the same flags, so what two units both contain (the
//! module-scope shared variables, `core`'s panic functions and their prototypes) is the same text:
//! it is kept once. A name defined by two units with different text is an error, never a silent
//! pick of one.

use std::collections::{BTreeMap, BTreeSet};

use crate::ptx_items::{defined_name, split, without_comments};

/// One module holding every unit's items: the shared header, then every declaration without a
/// body (deduplicated), then the definitions in unit order (deduplicated). `units` are
/// `(unit name, PTX)` pairs; the names are for error messages.
pub fn merge(units: &[(String, String)]) -> Result<String, String> {
    let mut header: Option<&str> = None;
    let mut declarations = Vec::new();
    let mut definitions = Vec::new();
    let mut seen = BTreeSet::new();
    // What each defined name was defined as (without comments), and by which unit.
    let mut defined: BTreeMap<(bool, &str), (&str, String)> = BTreeMap::new();
    for (unit, ptx) in units {
        let (unit_header, items) = split(ptx).map_err(|e| format!("unit {unit}: {e}"))?;
        match header {
            None => header = Some(unit_header),
            Some(h) if h == unit_header => {}
            Some(_) => {
                return Err(format!(
                    "unit {unit}: its PTX header differs from the first unit's"
                ))
            }
        }
        for item in items {
            let code = without_comments(item.text);
            if !seen.insert(code.clone()) {
                continue;
            }
            // A prototype and its definition share a name; two definitions (or two variables)
            // of one name must be the same text, already skipped above.
            let is_prototype = !item.has_body && item.text.trim_start().starts_with(".func");
            if let Some(name) = defined_name(item.text) {
                if let Some((other, text)) = defined.insert((is_prototype, name), (unit, code)) {
                    if text != without_comments(item.text) {
                        return Err(format!(
                            "units {other} and {unit} both define `{name}`, differently"
                        ));
                    }
                }
            }
            if item.has_body {
                definitions.push(item.text);
            } else if is_prototype || !item.text.trim_start().starts_with(".visible") {
                declarations.push(item.text);
            } else {
                definitions.push(item.text);
            }
        }
    }
    let mut out = String::from(header.ok_or("no units")?);
    out.push('\n');
    for text in declarations.iter().chain(&definitions) {
        out.push_str(text);
        out.push('\n');
    }
    Ok(out)
}
