//! `ds4-bench`: throughput benchmarks (`ds4-bench io`); the code lives in `ds4_stream::bench`.
fn main() -> std::process::ExitCode {
    ds4_stream::bench::main()
}
