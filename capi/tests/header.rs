//! The hand-written header and the library agree: every `ds4s_*` function the library exports
//! is declared in include/ds4stream.h and every one declared there is exported; every status code
//! has the same value on both sides; the structs have the sizes the header's layout implies.

use std::collections::BTreeSet;

const HEADER: &str = include_str!("../../include/ds4stream.h");
const SOURCES: [&str; 6] = [
    include_str!("../src/handle.rs"),
    include_str!("../src/library.rs"),
    include_str!("../src/query.rs"),
    include_str!("../src/read.rs"),
    include_str!("../src/experts.rs"),
    include_str!("../src/error.rs"),
];

/// Names after `extern "C" fn ` in the Rust sources.
fn exported() -> BTreeSet<String> {
    let mut v = BTreeSet::new();
    for src in SOURCES {
        for part in src.split("extern \"C\" fn ").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            v.insert(name);
        }
    }
    v
}

/// Names of functions declared `DS4S_API ... name(` in the header.
fn declared() -> BTreeSet<String> {
    let mut v = BTreeSet::new();
    for part in HEADER.split("DS4S_API ").skip(1) {
        let Some(paren) = part.find('(') else {
            continue;
        };
        let name = part[..paren].rsplit([' ', '*']).next().unwrap_or("");
        if name.starts_with("ds4s_") {
            v.insert(name.to_string());
        }
    }
    v
}

#[test]
fn every_exported_function_is_declared_and_the_other_way_round() {
    let (e, d) = (exported(), declared());
    assert!(e.len() >= 18, "found only {e:?}");
    assert_eq!(
        e, d,
        "exported (left) vs declared in include/ds4stream.h (right)"
    );
}

#[test]
fn status_codes_match_the_header() {
    for (code, name) in ds4stream::error::STATUS_NAMES {
        let needle = format!("{name} = {code}");
        assert!(HEADER.contains(&needle), "header lacks `{needle}`");
    }
}

#[test]
fn struct_sizes_match_the_headers_field_lists() {
    use ds4stream::*;
    // Sizes implied by the header's fields (all naturally aligned, no padding on LP64/LLP64).
    assert_eq!(std::mem::size_of::<Ds4sOptions>(), 4 * 4 + 8 + 4 * 4);
    assert_eq!(std::mem::size_of::<Ds4sLayout>(), 12 * 4 + 9 * 8);
    assert_eq!(std::mem::size_of::<Ds4sTensor>(), 4 * 4 + 6 * 8);
    assert_eq!(
        std::mem::size_of::<Ds4sRange>(),
        2 * 8 + std::mem::size_of::<usize>()
    );
    assert_eq!(std::mem::size_of::<Ds4sStats>(), 2 * 4 + 11 * 8);
    assert_eq!(
        std::mem::size_of::<Ds4sExpertPtrs>(),
        3 * std::mem::size_of::<usize>() + 3 * 8 + 2 * 4
    );
    assert_eq!(ABI_VERSION, 1);
    for (name, v) in [
        ("DS4S_OPEN_NO_DIRECT_IO", DS4S_OPEN_NO_DIRECT_IO),
        ("DS4S_OPEN_COLD", DS4S_OPEN_COLD),
    ] {
        assert!(
            HEADER.contains(&format!("#define {name} {v:#x}u")),
            "{name}"
        );
    }
    assert!(HEADER.contains("#define DS4S_ABI_VERSION 1u"));
    assert!(HEADER.contains(&format!("#define DS4S_STRUCT_SIZE_MAX {STRUCT_SIZE_MAX}u")));
}
