fn main() -> std::process::ExitCode {
    ds4_stream::cli::main()
}
