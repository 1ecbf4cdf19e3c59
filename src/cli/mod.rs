//! The `ds4` command line. `main` returns an exit code: 0 ok, 1 runtime error, 2 usage error or
//! bad input (a malformed file). Errors print once, on one line, to stderr; a broken pipe on
//! stdout counts as success (`ds4 cat … | head`).

mod cat;
mod demo;
mod gen;
mod inspect;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Out-of-core weight streaming for DeepSeek V4 Flash GGUF files.
#[derive(Parser, Debug)]
#[command(name = "ds4", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print a GGUF file's metadata, tensor table and DS4 layout.
    Inspect(inspect::Args),
    /// Write one tensor's bytes (or one expert's slice) to stdout.
    Cat(cat::Args),
    /// Write a deterministic DS4-layout GGUF (tiny, demo or full flash shape).
    GenModel(gen::Args),
    /// Generate the demo model if needed and stream its experts through the engine (the main
    /// job on the embedded default).
    Demo(demo::Args),
}

/// A command's failure: what to print and which exit code to return.
#[derive(Debug)]
pub struct CliError {
    /// 1 = runtime error, 2 = usage error or bad input.
    pub code: u8,
    pub message: String,
}

impl CliError {
    /// Bad input (malformed file, wrong argument value): exit 2.
    pub fn bad_input(msg: impl std::fmt::Display) -> Self {
        Self {
            code: 2,
            message: msg.to_string(),
        }
    }
    /// Runtime failure (IO error, device error): exit 1.
    pub fn runtime(msg: impl std::fmt::Display) -> Self {
        Self {
            code: 1,
            message: msg.to_string(),
        }
    }
}

pub type CliResult = Result<(), CliError>;

/// Prints `err` and its source chain on one line.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut s = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let m = e.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = e.source();
    }
    s
}

/// True when an IO error is a broken pipe (the reader went away: not our failure).
pub fn is_broken_pipe(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

/// Entry point of the `ds4` binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let r = match cli.command {
        Command::Inspect(a) => inspect::run(a),
        Command::Cat(a) => cat::run(a),
        Command::GenModel(a) => gen::run(a),
        Command::Demo(a) => demo::run(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ds4: error: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}
