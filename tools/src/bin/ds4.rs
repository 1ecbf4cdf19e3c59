fn main() -> std::process::ExitCode {
    ds4_tools::cli::main()
}
