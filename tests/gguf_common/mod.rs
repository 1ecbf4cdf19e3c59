//! Shared helpers for the GGUF tests: a byte-level header builder (so hostile headers can be
//! written field by field), a small valid file, and the python oracle lookup.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Value type ids (GGUF spec / gguf-py `GGUFValueType`).
pub const UINT8: u32 = 0;
pub const INT8: u32 = 1;
pub const UINT16: u32 = 2;
pub const INT16: u32 = 3;
pub const UINT32: u32 = 4;
pub const INT32: u32 = 5;
pub const FLOAT32: u32 = 6;
pub const BOOL: u32 = 7;
pub const STRING: u32 = 8;
pub const ARRAY: u32 = 9;
pub const UINT64: u32 = 10;
pub const INT64: u32 = 11;
pub const FLOAT64: u32 = 12;

/// Little-endian byte builder.
#[derive(Default, Clone)]
pub struct B(pub Vec<u8>);

impl B {
    pub fn new() -> Self {
        Self(Vec::new())
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.raw(&[v])
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    pub fn f32(&mut self, v: f32) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }
    /// A GGUF string: u64 length + bytes.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.bytes_str(s.as_bytes())
    }
    pub fn bytes_str(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64).raw(s)
    }
    /// Magic, version, tensor count, kv count.
    pub fn header(&mut self, version: u32, tensors: u64, kvs: u64) -> &mut Self {
        self.raw(b"GGUF").u32(version).u64(tensors).u64(kvs)
    }
    /// Key + value type; the value itself follows.
    pub fn key(&mut self, key: &str, ty: u32) -> &mut Self {
        self.str(key).u32(ty)
    }
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.key(key, UINT32).u32(v)
    }
    pub fn kv_str(&mut self, key: &str, v: &str) -> &mut Self {
        self.key(key, STRING).str(v)
    }
    /// A tensor info.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, rel_offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(rel_offset)
    }
    /// Pads to `align` with zeros (the data section start).
    pub fn pad(&mut self, align: usize) -> &mut Self {
        while self.0.len() % align != 0 {
            self.0.push(0);
        }
        self
    }
    /// Appends `n` bytes of a recognisable pattern.
    pub fn data(&mut self, n: usize) -> &mut Self {
        let start = self.0.len();
        self.0.extend((0..n).map(|i| ((start + i) * 7 % 251) as u8));
        self
    }
    pub fn build(&self) -> Vec<u8> {
        self.0.clone()
    }
}

/// A small valid v3 file: every scalar value type, a string, an array of strings, a nested
/// array, and three tensors (F32 [8], Q8_0 [32, 2], F16 [4, 2, 2]) at alignment 32.
/// Data: F32 32 B at 0, Q8_0 68 B at 32 (padded to 128), F16 32 B at 128.
pub fn small_valid() -> Vec<u8> {
    let mut b = B::new();
    b.header(3, 3, 16);
    b.kv_str("general.architecture", "test");
    b.key("u8", UINT8).u8(200);
    b.key("i8", INT8).u8((-5i8) as u8);
    b.key("u16", UINT16).u16(60000);
    b.key("i16", INT16).u16((-300i16) as u16);
    b.kv_u32("u32", 4_000_000_000);
    b.key("i32", INT32).u32((-70000i32) as u32);
    b.key("f32", FLOAT32).f32(1.5);
    b.key("bool", BOOL).u8(1);
    b.key("u64", UINT64).u64(1 << 40);
    b.key("i64", INT64).i64(-(1 << 40));
    b.key("f64", FLOAT64).raw(&(-2.25f64).to_le_bytes());
    b.key("strs", ARRAY)
        .u32(STRING)
        .u64(3)
        .str("a")
        .str("")
        .str("ccc");
    b.key("nested", ARRAY)
        .u32(ARRAY)
        .u64(2)
        .u32(INT32)
        .u64(2)
        .u32(1)
        .u32(2)
        .u32(INT32)
        .u64(1)
        .u32(3);
    b.kv_u32("general.alignment", 32);
    b.kv_str("unicode", "déjà vu ✓");
    b.tensor("a.f32", &[8], 0, 0);
    b.tensor("b.q8", &[32, 2], 8, 32);
    b.tensor("c.f16", &[4, 2, 2], 1, 128);
    b.pad(32);
    b.data(160);
    b.build()
}

/// The python with gguf-py 0.19 to use as the oracle. Panics (failing the test) with a clear
/// message when DS4_PYTHON is unset: a test that needs the oracle must not pass without it.
pub fn python() -> PathBuf {
    match std::env::var_os("DS4_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!(
            "DS4_PYTHON is not set: this test needs python with gguf==0.19.0 as its oracle. \
             Run `bash .ci/test.sh` (it creates .venv and sets DS4_PYTHON) or set DS4_PYTHON \
             to such a python"
        ),
    }
}

/// Runs tests/py/gguf_oracle.py with `args` under the oracle python; returns stdout. Fails the
/// test with python's stderr if the script fails.
pub fn oracle(args: &[&std::ffi::OsStr]) -> String {
    let out = std::process::Command::new(python())
        .arg(py_script("gguf_oracle.py"))
        .args(args)
        .output()
        .expect("cannot run DS4_PYTHON");
    assert!(
        out.status.success(),
        "gguf_oracle.py {:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("oracle output is UTF-8")
}

/// Path of a script under tests/py (of the repository: this module is also included by the
/// tests of `tools/`, whose manifest directory is one below).
pub fn py_script(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = if dir.join("tests/py").is_dir() {
        dir
    } else {
        dir.parent().expect("tools/ has a parent")
    };
    root.join("tests").join("py").join(name)
}

/// Deterministic xorshift64* generator for the fuzz-like loops.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
