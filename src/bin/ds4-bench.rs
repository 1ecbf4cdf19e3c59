//! `ds4-bench`: throughput benchmarks. PLACEHOLDER (skeleton): `ds4-bench io` lands with the
//! IO-engine issue.
fn main() -> std::process::ExitCode {
    eprintln!("ds4-bench: no benchmarks yet");
    std::process::ExitCode::from(2)
}
