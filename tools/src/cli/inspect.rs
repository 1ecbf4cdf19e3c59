//! `ds4 inspect FILE [--json]`: what a GGUF file declares, read through the hostile-safe parser.
//!
//! Two views of one parsed header: text for people (metadata summary with long arrays and
//! strings shortened, the tensor table, totals) and one JSON object for machines. Each view is
//! built by a function returning a value ([`text_view`], [`json_view`]) so further sections (the
//! DS4 model view) can be appended before printing. Only the header is read; tensor data is not.
//!
//! Exit codes: 0 ok; 2 for a malformed file and for a path that cannot be opened or is not a
//! regular file (bad input from the user); 1 for an IO error while reading an opened file.

use super::{CliError, CliResult};
use ds4_stream::gguf::{parse_file, Caps, GgufError, GgufFile, Value};
use ds4_stream::model::{Ds4Model, ExpertKind, Layer};
use ds4_stream::units::human_bytes;
use serde_json::{json, Map, Value as J};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Arrays up to this many elements appear in full in `--json`; longer ones are summarised as
/// `{"type":"array","len":N,"elem":"STRING"}`.
pub const JSON_ARRAY_MAX: usize = 64;
/// Arrays up to this many elements appear inline in the text view; longer: `[N x TYPE]`.
const TEXT_ARRAY_MAX: usize = 16;
/// Strings longer than this (in chars) are cut in the text view, with their byte length shown.
const TEXT_STRING_MAX: usize = 64;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// GGUF file to inspect (only its header is read).
    pub file: PathBuf,

    /// Print one JSON object instead of text (tensor offsets absolute, types as gguf-py names
    /// them, shapes in GGUF order; long metadata arrays summarised).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CliResult {
    let f = load(&args.file)?;
    // The DS4 view: the routed-expert map when the file has the DS4 layout, else why not
    // (inspect works on any GGUF; only DS4 commands need the layout).
    let ds4 = ds4_stream::model::Ds4Model::from_gguf(&f);
    let out = if args.json {
        let mut obj = json_view(&f);
        let view = match &ds4 {
            Ok(m) => ds4_json(m),
            Err(e) => json!({ "error": super::chain(e) }),
        };
        obj.insert("ds4".into(), view);
        let mut s = serde_json::to_string_pretty(&J::Object(obj))
            .map_err(|e| CliError::runtime(format!("cannot render JSON: {e}")))?;
        s.push('\n');
        s
    } else {
        let mut t = text_view(&args.file, &f);
        match &ds4 {
            Ok(m) => {
                t.push('\n');
                t.push_str(&m.summary_text());
                if !t.ends_with('\n') {
                    t.push('\n');
                }
            }
            Err(e) => {
                let _ = writeln!(t, "\nnot a DS4 model: {}", super::chain(e));
            }
        }
        t
    };
    super::out(&out).map(|_| ())
}

/// Parses `path`'s header, mapping errors to exit codes: a malformed file or a path that cannot
/// be opened is bad input (2); a failing read of an opened file is a runtime error (1). The
/// message always starts with the path.
pub fn load(path: &Path) -> Result<GgufFile, CliError> {
    parse_file(path, &Caps::default()).map_err(|e| {
        let msg = match e.path() {
            // Open / NotAFile / Io errors already name the path.
            Some(_) => super::chain(&e),
            None => format!("{}: {}", path.display(), super::chain(&e)),
        };
        match e {
            GgufError::Io { .. } => CliError::runtime(msg),
            _ => CliError::bad_input(msg),
        }
    })
}

// ---- JSON ----

/// The JSON object for a header. Metadata is an object keyed by name; small arrays are
/// included in full, long ones summarised; floats that JSON cannot hold (NaN, inf) are strings.
pub fn json_view(f: &GgufFile) -> Map<String, J> {
    let mut o = Map::new();
    o.insert("version".into(), f.version.into());
    o.insert("alignment".into(), f.alignment.into());
    o.insert("data_offset".into(), f.data_offset.into());
    o.insert("file_size".into(), f.file_size.into());
    let md: Map<String, J> = f
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), json_value(v)))
        .collect();
    o.insert("metadata".into(), J::Object(md));
    let tensors: Vec<J> = f
        .tensors
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "type": t.ggml_type.name(),
                "shape": t.dims,
                "offset": t.offset,
                "nbytes": t.nbytes,
            })
        })
        .collect();
    o.insert("tensors".into(), J::Array(tensors));
    o
}

/// One metadata value as JSON.
pub fn json_value(v: &Value) -> J {
    match v {
        Value::U8(x) => (*x).into(),
        Value::I8(x) => (*x).into(),
        Value::U16(x) => (*x).into(),
        Value::I16(x) => (*x).into(),
        Value::U32(x) => (*x).into(),
        Value::I32(x) => (*x).into(),
        Value::U64(x) => (*x).into(),
        Value::I64(x) => (*x).into(),
        Value::Bool(x) => (*x).into(),
        Value::String(s) => s.as_str().into(),
        // Through the shortest decimal that reads back as the same f32 ("0.1", not
        // "0.10000000149011612").
        Value::F32(x) => json_float(format!("{x:?}").parse().unwrap_or(f64::from(*x))),
        Value::F64(x) => json_float(*x),
        Value::Array(items) if items.len() <= JSON_ARRAY_MAX => {
            J::Array(items.iter().map(json_value).collect())
        }
        Value::Array(items) => json!({
            "type": "array",
            "len": items.len(),
            "elem": v.elem_type_name().unwrap_or("unknown"),
        }),
    }
}

fn json_float(x: f64) -> J {
    match serde_json::Number::from_f64(x) {
        Some(n) => J::Number(n),
        None => J::String(x.to_string()), // "NaN", "inf", "-inf"
    }
}

/// The DS4 view as one JSON object: shape, bytes per expert (per kind and total, from layer 0; `uniform`
/// says whether every layer matches), routed vs resident totals, and per-layer details.
pub fn ds4_json(m: &Ds4Model) -> J {
    let s = &m.shape;
    let per_kind = |l: &Layer| {
        let mut m = serde_json::Map::new();
        for k in ExpertKind::ALL {
            m.insert(k.as_str().to_string(), json!(l.routed(k).expert_bytes));
        }
        m.insert("total".to_string(), json!(l.expert_bytes()));
        J::Object(m)
    };
    let layers: Vec<J> = m
        .layers
        .iter()
        .map(|l| {
            let mut m = serde_json::Map::new();
            m.insert("layer".into(), json!(l.index));
            m.insert("hash".into(), json!(l.hash));
            for k in ExpertKind::ALL {
                let r = l.routed(k);
                m.insert(
                    k.as_str().into(),
                    json!({
                        "name": r.tensor.name,
                        "type": r.tensor.ggml_type.name(),
                        "offset": r.tensor.offset,
                        "nbytes": r.tensor.nbytes,
                        "expert_bytes": r.expert_bytes,
                    }),
                );
            }
            m.insert("expert_bytes".into(), json!(l.expert_bytes()));
            J::Object(m)
        })
        .collect();
    json!({
        "layers": s.n_layer,
        "hash_layers": s.n_hash_layer,
        "experts_per_layer": s.n_expert,
        "experts_used": s.n_expert_used,
        "shared_experts": s.n_shared,
        "embedding_length": s.n_embd,
        "expert_feed_forward_length": s.expert_ff,
        "vocab_size": s.vocab,
        "uniform": m.is_uniform(),
        "bytes_per_expert": m.layers.first().map(per_kind),
        "routed_experts": m.n_routed_experts(),
        "routed_bytes": m.routed_bytes,
        "resident_bytes": m.resident_bytes,
        "resident_tensors": m.resident.len(),
        "per_layer": layers,
    })
}

// ---- text ----

/// The text view: header line, metadata summary, tensor table, totals.
pub fn text_view(path: &Path, f: &GgufFile) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "file:         {}", path.display());
    let _ = writeln!(s, "version:      GGUF v{}", f.version);
    let _ = writeln!(s, "alignment:    {}", f.alignment);
    let _ = writeln!(s, "data offset:  {} ({:#x})", f.data_offset, f.data_offset);
    let _ = writeln!(
        s,
        "file size:    {} ({})",
        f.file_size,
        human_bytes(f.file_size)
    );

    let _ = writeln!(s, "\nmetadata ({} keys):", f.metadata.len());
    let kw = f
        .metadata
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0)
        .min(48);
    for (k, v) in &f.metadata {
        let _ = writeln!(s, "  {k:<kw$}  {:<8} {}", v.type_name(), text_value(v));
    }

    let _ = writeln!(s, "\ntensors ({}):", f.tensors.len());
    let rows: Vec<[String; 5]> = f
        .tensors
        .iter()
        .map(|t| {
            let shape: Vec<String> = t.dims.iter().map(u64::to_string).collect();
            [
                t.name.clone(),
                t.ggml_type.name().to_owned(),
                format!("[{}]", shape.join(", ")),
                t.offset.to_string(),
                t.nbytes.to_string(),
            ]
        })
        .collect();
    let header = ["name", "type", "shape", "offset", "bytes"].map(String::from);
    let mut w = header.clone().map(|h| h.len());
    for r in &rows {
        for (wi, c) in w.iter_mut().zip(r) {
            *wi = (*wi).max(c.chars().count());
        }
    }
    for r in std::iter::once(&header).chain(&rows) {
        let _ = writeln!(
            s,
            "  {:<w0$}  {:<w1$}  {:<w2$}  {:>w3$}  {:>w4$}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4]
        );
    }

    // Sums cannot overflow for a parsed file (every tensor lies within it), but a file with
    // overlapping tensors could declare more than its size: saturate rather than trust it.
    let total = f
        .tensors
        .iter()
        .fold(0u64, |a, t| a.saturating_add(t.nbytes));
    let _ = writeln!(
        s,
        "\ntotal: {} tensors, {} bytes ({}) in a data section of {}",
        f.tensors.len(),
        total,
        human_bytes(total),
        human_bytes(f.file_size.saturating_sub(f.data_offset))
    );
    let mut by_type: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for t in &f.tensors {
        let e = by_type.entry(t.ggml_type.name()).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(t.nbytes);
    }
    for (ty, (n, b)) in by_type {
        let _ = writeln!(s, "  {ty:<8} {n:>6} tensors  {:>12}", human_bytes(b));
    }
    s
}

/// One metadata value for the text view: short arrays inline, long ones as `[N x TYPE]`,
/// long strings cut.
fn text_value(v: &Value) -> String {
    match v {
        Value::String(x) => text_string(x),
        // Nested arrays count every value they hold: 16 arrays of 16 arrays of ... would
        // otherwise print a million values on one line.
        Value::Array(items) if items.len() > TEXT_ARRAY_MAX || !fits_inline(v) => {
            format!("[{} x {}]", items.len(), v.elem_type_name().unwrap_or("?"))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(text_value).collect();
            format!("[{}]", parts.join(", "))
        }
        // Debug: shortest round-trip form, with an exponent for very large or small values.
        Value::F32(x) => format!("{x:?}"),
        Value::F64(x) => format!("{x:?}"),
        Value::Bool(x) => x.to_string(),
        Value::U8(x) => x.to_string(),
        Value::I8(x) => x.to_string(),
        Value::U16(x) => x.to_string(),
        Value::I16(x) => x.to_string(),
        Value::U32(x) => x.to_string(),
        Value::I32(x) => x.to_string(),
        Value::U64(x) => x.to_string(),
        Value::I64(x) => x.to_string(),
    }
}

/// True when array `v` holds at most 2 x [`TEXT_ARRAY_MAX`] values in all, nested arrays
/// counted as values too (16 levels of empty arrays print as much as their elements would).
/// Stops counting past the limit, so it costs O(limit) whatever the array's size.
fn fits_inline(v: &Value) -> bool {
    fn count(items: &[Value], left: &mut usize) -> bool {
        items.iter().all(|it| {
            *left = left.saturating_sub(1);
            *left > 0
                && match it {
                    Value::Array(inner) => count(inner, left),
                    _ => true,
                }
        })
    }
    let mut left = 2 * TEXT_ARRAY_MAX + 1;
    v.as_array().is_none_or(|items| count(items, &mut left))
}

fn text_string(x: &str) -> String {
    let n = x.chars().count();
    if n <= TEXT_STRING_MAX {
        return format!("{:?}", x);
    }
    let head: String = x.chars().take(TEXT_STRING_MAX).collect();
    format!("{head:?}... ({} bytes)", x.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ds4_json_of_the_flash_layout() {
        use ds4_stream::generate::{plan_layout, FillPlan, Shape};
        let f = plan_layout(&Shape::flash(), 0, &FillPlan::full())
            .unwrap()
            .expected_file();
        let j = ds4_json(&Ds4Model::from_gguf(&f).unwrap());
        assert_eq!(j["bytes_per_expert"]["total"], 7_077_888);
        assert_eq!(j["bytes_per_expert"]["down"], 2_752_512);
        assert_eq!(j["routed_bytes"], 77_913_391_104u64);
        assert_eq!(j["uniform"], true);
        assert_eq!(j["per_layer"].as_array().unwrap().len(), 43);
        assert_eq!(j["per_layer"][42]["gate"]["type"], "IQ2_XXS");
    }

    #[test]
    fn json_values() {
        assert_eq!(json_value(&Value::F32(0.1)), json!(0.1));
        assert_eq!(json_value(&Value::F32(f32::NAN)), json!("NaN"));
        assert_eq!(json_value(&Value::I64(i64::MIN)), json!(i64::MIN));
        let long = Value::Array(vec![Value::String("a".into()); JSON_ARRAY_MAX + 1]);
        assert_eq!(
            json_value(&long),
            json!({"type": "array", "len": JSON_ARRAY_MAX + 1, "elem": "STRING"})
        );
        let short = Value::Array(vec![Value::U8(1); JSON_ARRAY_MAX]);
        assert_eq!(json_value(&short), json!(vec![1; JSON_ARRAY_MAX]));
    }

    #[test]
    fn text_values() {
        assert_eq!(text_value(&Value::I8(-3)), "-3");
        assert_eq!(text_value(&Value::U64(u64::MAX)), u64::MAX.to_string());
        assert_eq!(text_value(&Value::I64(i64::MIN)), i64::MIN.to_string());
        let long = Value::Array(vec![Value::I32(0); 129_280]);
        assert_eq!(text_value(&long), "[129280 x INT32]");
        let nested = Value::Array(vec![Value::Array(vec![Value::U8(1); 16]); 16]);
        assert_eq!(text_value(&nested), "[16 x ARRAY]");
        let small = Value::Array(vec![Value::Array(vec![Value::U8(1); 2]); 8]);
        assert!(text_value(&small).starts_with("[[1, 1], [1, 1]"));
        let empties = Value::Array(vec![Value::Array(vec![Value::Array(vec![]); 16]); 16]);
        assert_eq!(text_value(&empties), "[16 x ARRAY]");
        let s = "x".repeat(1000);
        let t = text_value(&Value::String(s));
        assert!(t.ends_with("... (1000 bytes)") && t.len() < 100, "{t}");
    }
}
