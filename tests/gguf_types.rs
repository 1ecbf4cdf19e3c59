//! The ggml type table and the metadata value type names against gguf-py 0.19 itself: every id,
//! name and block size must match in both directions.

mod gguf_common;

use ds4_stream::gguf::{value_type_name, GgmlType};
use gguf_common::oracle;
use serde_json::Value as J;

fn dump() -> J {
    serde_json::from_str(&oracle(&["types".as_ref()])).expect("oracle JSON")
}

#[test]
fn oracle_is_gguf_py_0_19() {
    let d = dump();
    assert_eq!(
        d["gguf_version"], "0.19.0",
        "the oracle must be gguf==0.19.0"
    );
}

#[test]
fn ggml_type_table_matches_gguf_py() {
    let d = dump();
    let theirs: Vec<(u32, String, u64, u64)> = d["ggml"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_u64().unwrap() as u32,
                t["name"].as_str().unwrap().to_owned(),
                t["block"].as_u64().unwrap(),
                t["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let ours: Vec<(u32, String, u64, u64)> = GgmlType::all()
        .map(|t| {
            (
                t.id(),
                t.name().to_owned(),
                t.block_elems(),
                t.block_bytes(),
            )
        })
        .collect();
    for t in &theirs {
        assert!(
            ours.contains(t),
            "gguf-py has {t:?}; our table lacks it or differs"
        );
    }
    for t in &ours {
        assert!(theirs.contains(t), "our table has {t:?}; gguf-py does not");
    }
    // Lookups agree with the table.
    for (id, name, _, _) in &theirs {
        let t = GgmlType::from_id(*id).unwrap();
        assert_eq!(t.name(), name);
        assert_eq!(GgmlType::from_name(name), Some(t));
        assert_eq!(GgmlType::from_name(&name.to_lowercase()), Some(t));
    }
    // Ids gguf-py does not know are unknown to us too.
    for id in 0..64u32 {
        let known = theirs.iter().any(|t| t.0 == id);
        assert_eq!(GgmlType::from_id(id).is_some(), known, "id {id}");
    }
}

#[test]
fn value_type_names_match_gguf_py() {
    let d = dump();
    let vts = d["value_types"].as_array().unwrap();
    assert_eq!(vts.len(), 13);
    for v in vts {
        let id = v["id"].as_u64().unwrap() as u32;
        assert_eq!(value_type_name(id), v["name"].as_str(), "value type {id}");
    }
    assert_eq!(value_type_name(13), None);
}
