//! The name `CreateFileW` gets for a path.
//!
//! Without the `\\?\` prefix, the Win32 layer limits a path to `MAX_PATH` (260) characters
//! *after* it has made it absolute: a relative path is joined to the current directory first, so
//! a short relative path under a deep current directory fails as well ("Maximum Path Length
//! Limitation": "because you cannot use the `\\?\` prefix with a relative path, relative paths
//! are always limited to a total of MAX_PATH characters"). std opens such paths (its
//! `maybe_verbatim` makes every path that is not short and drive-absolute or UNC absolute and
//! verbatim), and the GGUF header is read with std, so the reader must open them too.
//!
//! The rule here is std's: the raw path when it is short (fewer than 248 UTF-16 units with its
//! NUL, std's `LEGACY_MAX_PATH`, which is below MAX_PATH and also the `CreateDirectory` limit)
//! *and* drive-absolute (`C:\…`, `C:/…`) or starting with two separators (UNC `\\server\share`,
//! device `\\.\`); a path already verbatim (`\\?\`, `\??\`) as it is; anything else, in
//! particular every relative path (`m\x.gguf`, `\x.gguf`, `C:x.gguf`), through
//! `std::path::absolute` (`GetFullPathNameW`: joins the current directory, resolves `.`, `..` and
//! `/`, which a verbatim path would take literally) and then `\\?\` + that (`\\?\UNC\server\…`
//! for UNC).

use std::io;
use std::os::windows::ffi::OsStrExt;
use std::path::Path;
use windows::core::HSTRING;

/// Paths shorter than this (UTF-16 units, NUL included) and drive-absolute or UNC are passed as
/// they are (std's threshold, `LEGACY_MAX_PATH`).
const SHORT: usize = 248;

const SEP: u16 = b'\\' as u16;
const ALT_SEP: u16 = b'/' as u16;
const COLON: u16 = b':' as u16;

/// The name `CreateFileW` gets for `path` (see the module docs).
pub(super) fn create_name(path: &Path) -> io::Result<HSTRING> {
    let wide: Vec<u16> = path.as_os_str().encode_wide().collect();
    if is_verbatim(&wide) || (wide.len() + 1 < SHORT && is_absolute_form(&wide)) {
        return Ok(HSTRING::from_wide(&wide));
    }
    let abs: Vec<u16> = std::path::absolute(path)?
        .as_os_str()
        .encode_wide()
        .collect();
    Ok(HSTRING::from_wide(&verbatim(&abs)))
}

/// `\\?\…` or `\??\…`: taken literally by Windows, never rewritten here.
fn is_verbatim(w: &[u16]) -> bool {
    w.starts_with(&wide_str(r"\\?\")) || w.starts_with(&wide_str(r"\??\"))
}

/// Drive-absolute (`C:\…`, `C:/…`) or starting with two separators (UNC or device). A bare
/// `C:` or `C:x` is relative to drive C:'s current directory and is not matched (std passes a
/// bare `C:` through; here it is made absolute, which opens the same file).
fn is_absolute_form(w: &[u16]) -> bool {
    match w {
        [drive, COLON, SEP | ALT_SEP, ..] => *drive != SEP && *drive != ALT_SEP,
        [SEP | ALT_SEP, SEP | ALT_SEP, ..] => true,
        _ => false,
    }
}

/// `\\?\` + an absolute path: `C:\x` -> `\\?\C:\x`, `\\server\share\x` ->
/// `\\?\UNC\server\share\x`; paths already in a device form (`\\?\`, `\\.\`) stay.
pub(super) fn verbatim(abs: &[u16]) -> Vec<u16> {
    if is_verbatim(abs) || abs.starts_with(&wide_str(r"\\.\")) {
        return abs.to_vec();
    }
    if let Some(unc) = abs.strip_prefix(&wide_str(r"\\")[..]) {
        return [&wide_str(r"\\?\UNC\")[..], unc].concat();
    }
    [&wide_str(r"\\?\")[..], abs].concat()
}

pub(super) fn wide_str(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(p: &str) -> String {
        create_name(Path::new(p)).unwrap().to_string()
    }

    #[test]
    fn verbatim_forms() {
        let v = |s: &str| String::from_utf16(&verbatim(&wide_str(s))).unwrap();
        assert_eq!(v(r"C:\m\x.gguf"), r"\\?\C:\m\x.gguf");
        assert_eq!(v(r"\\srv\share\x.gguf"), r"\\?\UNC\srv\share\x.gguf");
        assert_eq!(v(r"\\?\C:\x.gguf"), r"\\?\C:\x.gguf");
        assert_eq!(v(r"\\.\PhysicalDrive0"), r"\\.\PhysicalDrive0");
    }

    /// Short drive-absolute and UNC paths go as they are; long ones and every relative form
    /// become `\\?\` + absolute.
    #[test]
    fn raw_only_when_short_and_absolute() {
        assert_eq!(name(r"C:/models/../x.gguf"), r"C:/models/../x.gguf");
        assert_eq!(name(r"C:\m\x.gguf"), r"C:\m\x.gguf");
        assert_eq!(name(r"\\srv\share\x.gguf"), r"\\srv\share\x.gguf");
        assert_eq!(name(r"\\?\C:\x.gguf"), r"\\?\C:\x.gguf");

        let long = format!(r"C:\{}\..\m/x.gguf", "d".repeat(300));
        assert_eq!(
            name(&long),
            r"\\?\C:\m\x.gguf",
            "absolute resolves .. and /"
        );
        let long_unc = format!(r"\\srv\share\{}\..\x.gguf", "d".repeat(300));
        assert_eq!(name(&long_unc), r"\\?\UNC\srv\share\x.gguf");
        // 246 units + NUL = 247 < 248: raw; one more: prefixed.
        let edge = format!(r"C:\{}", "e".repeat(243));
        assert_eq!(edge.len(), 246);
        assert_eq!(name(&edge), edge);
        let over = format!(r"C:\{}", "e".repeat(244));
        assert_eq!(name(&over), format!(r"\\?\{over}"));

        // Relative forms, however short: joined to the current directory (of the current drive
        // for `\x`, of drive C: for `C:x`), then prefixed.
        let cwd = std::env::current_dir().unwrap();
        let expect = format!(r"\\?\{}", cwd.join(r"m\x.gguf").display());
        assert_eq!(name(r"m\x.gguf"), expect);
        assert_eq!(name(r"m/./x.gguf"), expect);
        assert!(name(r"\x.gguf").starts_with(r"\\?\") && name(r"\x.gguf").ends_with(r":\x.gguf"));
        assert!(
            name("C:x.gguf").starts_with(r"\\?\C:\"),
            "{}",
            name("C:x.gguf")
        );
    }
}
