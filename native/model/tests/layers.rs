//! The crate's modules in layers (lib.rs lists them): a module uses only modules of
//! lower layers, so no two modules use each other, directly or around a circle.
//! Read from the sources: every `crate::<module>` outside comments counts.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// Every module of `src/` with its layer, the bottom first.
const LAYERS: &[&[&str]] = &[
    &["ids", "printable"],
    &["repr", "texts", "listpack", "units", "state"],
    &["calls"],
    &["fail", "history"],
    &["recorder", "waits", "lag", "nodes"],
    &["model", "trim"],
    &["handlers"],
    &["replay"],
    &["persist", "routing"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The crate modules a source uses (`crate::x`), comments left out.
fn uses(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
    }
    found
}

/// module -> the sources it is made of (`handlers/` is one module).
fn sources() -> BTreeMap<String, Vec<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        if path.is_dir() {
            for inner in fs::read_dir(&path).unwrap() {
                let text = fs::read_to_string(inner.unwrap().path()).unwrap();
                out.entry(name.clone()).or_default().push(text);
            }
        } else if name != "lib" {
            out.entry(name)
                .or_default()
                .push(fs::read_to_string(&path).unwrap());
        }
    }
    out
}

#[test]
fn every_module_has_a_layer() {
    let missing: Vec<String> = sources()
        .into_keys()
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(missing.is_empty(), "modules in no layer: {missing:?}");
}

#[test]
fn modules_use_only_lower_layers() {
    let mut upward = Vec::new();
    for (module, texts) in sources() {
        let Some(here) = layer_of(&module) else {
            continue;
        };
        for text in &texts {
            for used in uses(text) {
                // `crate::IndexMap`: the crate root's alias
                if used == "IndexMap" || used == module {
                    continue;
                }
                match layer_of(&used) {
                    Some(there) if there < here => {}
                    _ => upward.push(format!("{module} uses {used}")),
                }
            }
        }
    }
    upward.sort();
    upward.dedup();
    assert!(upward.is_empty(), "uses that do not go down: {upward:?}");
}

#[test]
fn the_reader_finds_uses_and_skips_comments() {
    let text = "use crate::a::B;\n// crate::c is only named\nlet x = crate::d::e(); // crate::f\n";
    assert_eq!(uses(text), ["a", "d"]);
}
