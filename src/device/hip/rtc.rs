//! hipRTC, loaded at run time: compiles `kernels/ds4_kernels.cu` into an AMD code object that
//! `hipModuleLoadData` takes.
//!
//! Why loaded and not linked: ROCm moved hipRTC out of libamdhip64 into its own library in 6.0
//! (`libhiprtc.so.6` / `.7`; on Windows `hiprtc<MM><mm>.dll`, e.g. `hiprtc0602.dll` for HIP
//! 6.2, with a new name every minor release), while ROCm 5 (Debian's 5.2 too) exports the same
//! functions from libamdhip64 itself. Linking one name would tie the binary to one release, so
//! [`Rtc::load`] tries, in order: `DS4_HIPRTC` (a path or name), then on Linux
//! `libhiprtc.so.7`, `libhiprtc.so.6`, `libhiprtc.so`, `libamdhip64.so.5`, `libamdhip64.so`; on
//! Windows every `hiprtc*.dll` in `%HIP_PATH%\bin` (newest name first), then `hiprtc07mm.dll`
//! and `hiprtc06mm.dll` by name. Only hipRTC's C ABI is used (ints and pointers, stable
//! since ROCm 4.2).
//!
//! Target: with no option hipRTC compiles for the current device (it asks the HIP runtime for
//! the device's `gcnArchName`); `DS4_HIP_ARCH=gfx1151` (any `--offload-arch` value) names it
//! instead, which also lets a machine without a GPU compile (CI does, for gfx1030 and gfx90a).

use crate::device::{BackendKind, DeviceError};
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr, CString, OsString};
use std::sync::{Mutex, PoisonError};

type Program = *mut c_void;
type Res = c_int;
const HIPRTC_SUCCESS: Res = 0;

type CreateFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> Res;
type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Res;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> Res;
type BytesFn = unsafe extern "C" fn(Program, *mut c_char) -> Res;
type DestroyFn = unsafe extern "C" fn(*mut Program) -> Res;
type ErrorStringFn = unsafe extern "C" fn(Res) -> *const c_char;

/// The hipRTC functions we call, from one loaded library.
pub(super) struct Rtc {
    create: CreateFn,
    compile: CompileFn,
    log_size: SizeFn,
    log: BytesFn,
    code_size: SizeFn,
    code: BytesFn,
    destroy: DestroyFn,
    error_string: ErrorStringFn,
    /// Where the functions came from (for messages).
    pub(super) from: String,
    // Last: the function pointers above point into it.
    _lib: Library,
}

fn rtc_error(call: &'static str, code: i64, detail: String) -> DeviceError {
    DeviceError::Backend {
        backend: BackendKind::Hip,
        call,
        code,
        detail,
    }
}

/// Library names to try, in order (see the module docs).
fn candidates() -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    if let Some(v) = std::env::var_os("DS4_HIPRTC").filter(|v| !v.is_empty()) {
        out.push(v);
    }
    if cfg!(windows) {
        if let Some(bin) =
            std::env::var_os("HIP_PATH").map(|p| std::path::Path::new(&p).join("bin"))
        {
            let mut found: Vec<_> = std::fs::read_dir(&bin)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name())
                .filter(|n| {
                    let n = n.to_string_lossy().to_ascii_lowercase();
                    n.starts_with("hiprtc")
                        && n.ends_with(".dll")
                        && n["hiprtc".len()..n.len() - 4]
                            .bytes()
                            .all(|b| b.is_ascii_digit())
                        && n.len() > "hiprtc.dll".len()
                })
                .collect();
            found.sort();
            out.extend(
                found
                    .into_iter()
                    .rev()
                    .map(|n| bin.join(n).into_os_string()),
            );
        }
        for major in [7u32, 6] {
            for minor in (0..=20u32).rev() {
                out.push(format!("hiprtc{major:02}{minor:02}.dll").into());
            }
        }
    } else {
        for n in [
            "libhiprtc.so.7",
            "libhiprtc.so.6",
            "libhiprtc.so",
            "libamdhip64.so.5",
            "libamdhip64.so",
        ] {
            out.push(n.into());
        }
    }
    out
}

impl Rtc {
    /// Loads the first hipRTC found (see the module docs), or says which names were tried.
    pub(super) fn load() -> Result<Self, DeviceError> {
        let names = candidates();
        let mut last = String::new();
        for name in &names {
            // SAFETY: loading a library runs its initialisers; these are hipRTC / HIP runtime
            // libraries (or what the user named in DS4_HIPRTC), loaded the way their own
            // documentation expects (dlopen / LoadLibrary).
            let lib = match unsafe { Library::new(name) } {
                Ok(l) => l,
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            };
            match Self::from_lib(lib, name.to_string_lossy().into_owned()) {
                Ok(r) => return Ok(r),
                Err(e) => last = e,
            }
        }
        Err(rtc_error(
            "load hipRTC",
            -1,
            format!(
                "no hipRTC library found (tried DS4_HIPRTC, {}; last: {last}): the kernels are compiled at run time",
                names
                    .iter()
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))
    }

    fn from_lib(lib: Library, from: String) -> Result<Self, String> {
        /// Looks `name` up with the C signature `T`.
        ///
        /// # Safety
        /// `T` must be the symbol's signature (hiprtc.h), and the result must not outlive
        /// `lib` (`Rtc` keeps the library loaded for as long as it holds the pointers).
        unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
            // SAFETY: the caller's contract.
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| format!("{name}: {e}"))
        }
        // SAFETY: each symbol gets its hipRTC signature (the types above follow hiprtc.h); the
        // pointers live in `Self` beside `_lib`, which is dropped last.
        unsafe {
            Ok(Self {
                create: sym(&lib, "hiprtcCreateProgram")?,
                compile: sym(&lib, "hiprtcCompileProgram")?,
                log_size: sym(&lib, "hiprtcGetProgramLogSize")?,
                log: sym(&lib, "hiprtcGetProgramLog")?,
                code_size: sym(&lib, "hiprtcGetCodeSize")?,
                code: sym(&lib, "hiprtcGetCode")?,
                destroy: sym(&lib, "hiprtcDestroyProgram")?,
                error_string: sym(&lib, "hiprtcGetErrorString")?,
                from,
                _lib: lib,
            })
        }
    }

    fn describe(&self, r: Res) -> String {
        // SAFETY: takes any value and returns a static string or null.
        let p = unsafe { (self.error_string)(r) };
        if p.is_null() {
            return format!("hiprtcResult {r}");
        }
        // SAFETY: a non-null result is a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn check(&self, r: Res, call: &'static str) -> Result<(), DeviceError> {
        if r == HIPRTC_SUCCESS {
            return Ok(());
        }
        Err(rtc_error(call, r.into(), self.describe(r)))
    }

    /// Compiles `src` (named `name` in messages) with `options`; returns the code object.
    /// A failed compile's error carries hipRTC's log. One compile at a time per process: two
    /// concurrent compiles crashed Debian's HIP 5.2 hipRTC (SIGSEGV in `tests/hip_rtc.rs` run
    /// with two test threads), and the decode kernels compile once per device anyway.
    pub(super) fn compile(
        &self,
        src: &str,
        name: &str,
        options: &[String],
    ) -> Result<Vec<u8>, DeviceError> {
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
        let csrc = CString::new(src)
            .map_err(|_| rtc_error("hiprtcCreateProgram", -1, "NUL in the source".into()))?;
        let cname = CString::new(name)
            .map_err(|_| rtc_error("hiprtcCreateProgram", -1, "NUL in the name".into()))?;
        let copts = options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| rtc_error("hiprtcCompileProgram", -1, "NUL in an option".into()))?;
        let opt_ptrs: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings that outlive the call; no headers.
        let r = unsafe {
            (self.create)(
                &mut prog,
                csrc.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        self.check(r, "hiprtcCreateProgram")?;
        let out = self.compile_program(prog, &opt_ptrs);
        // SAFETY: `prog` was created above and is destroyed once.
        unsafe { (self.destroy)(&mut prog) };
        out
    }

    fn compile_program(
        &self,
        prog: Program,
        opts: &[*const c_char],
    ) -> Result<Vec<u8>, DeviceError> {
        // SAFETY: a live program; `opts` holds `opts.len()` NUL-terminated strings.
        let r = unsafe { (self.compile)(prog, opts.len() as c_int, opts.as_ptr()) };
        if r != HIPRTC_SUCCESS {
            let log = self.program_log(prog);
            return Err(rtc_error(
                "hiprtcCompileProgram",
                r.into(),
                format!(
                    "{} (hipRTC from {}); log: {}{}",
                    self.describe(r),
                    self.from,
                    if log.trim().is_empty() {
                        "(empty)"
                    } else {
                        log.trim()
                    },
                    if opts.is_empty() {
                        "; no target was named: hipRTC asks the HIP runtime for the current \
                         device's, so set DS4_HIP_ARCH=gfx… (e.g. gfx1151) if it cannot"
                    } else {
                        ""
                    }
                ),
            ));
        }
        let mut n = 0usize;
        // SAFETY: a live, compiled program; writes one size.
        let r = unsafe { (self.code_size)(prog, &mut n) };
        self.check(r, "hiprtcGetCodeSize")?;
        let mut code = vec![0u8; n];
        if n > 0 {
            // SAFETY: `code` has the `n` bytes hipRTC said the code object takes.
            let r = unsafe { (self.code)(prog, code.as_mut_ptr().cast()) };
            self.check(r, "hiprtcGetCode")?;
        }
        if code.is_empty() {
            return Err(rtc_error(
                "hiprtcGetCode",
                -1,
                "hipRTC returned an empty code object".into(),
            ));
        }
        Ok(code)
    }

    fn program_log(&self, prog: Program) -> String {
        let mut n = 0usize;
        // SAFETY: a live program; writes one size.
        if unsafe { (self.log_size)(prog, &mut n) } != HIPRTC_SUCCESS || n == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; n];
        // SAFETY: `buf` has the `n` bytes hipRTC said the log takes.
        if unsafe { (self.log)(prog, buf.as_mut_ptr().cast()) } != HIPRTC_SUCCESS {
            return String::new();
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }
}

/// The compile options of the kernels: `--offload-arch=$DS4_HIP_ARCH` when set, else none
/// (hipRTC compiles for the current device).
pub(super) fn options() -> Vec<String> {
    match std::env::var("DS4_HIP_ARCH") {
        Ok(a) if !a.trim().is_empty() => vec![format!("--offload-arch={}", a.trim())],
        _ => Vec::new(),
    }
}

/// Compiles the decode kernels for `arch` (an `--offload-arch` value) with no device needed:
/// what CI runs to check that kernels/ds4_kernels.cu is valid HIP. Returns the code object and
/// where hipRTC came from.
pub fn compile_kernels_for(arch: &str) -> Result<(Vec<u8>, String), DeviceError> {
    compile_source_for(crate::compute::DS4_KERNELS_CU, arch)
}

/// [`compile_kernels_for`] with another source (tests: a broken source must fail with hipRTC's
/// log in the error).
pub fn compile_source_for(src: &str, arch: &str) -> Result<(Vec<u8>, String), DeviceError> {
    let rtc = Rtc::load()?;
    let code = rtc.compile(src, "ds4_kernels.cu", &[format!("--offload-arch={arch}")])?;
    Ok((code, rtc.from.clone()))
}
