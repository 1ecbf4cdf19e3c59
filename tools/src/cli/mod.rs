//! The `ds4` command line. `main` returns an exit code: 0 ok, 1 runtime error, 2 usage error or
//! bad input (a malformed file, a bad argument). Errors print once, on one line, to stderr
//! (`ds4: error: …`, usage errors included); a broken pipe on stdout counts as success
//! (`ds4 cat … | head`); no output path panics (stdout goes through [`out`], never `println!`).

pub mod cat;
mod demo;
pub mod files;
mod gen_model;
mod inspect;
mod plan;
mod run;

use clap::{Parser, Subcommand};
use ds4_stream::choice::Choice;
use std::io::Write as _;
use std::process::ExitCode;

/// Out-of-core weight streaming for DeepSeek V4 Flash GGUF files. Without a command, runs the
/// MoE stack over the model's tokens (`ds4 --demo --ssd-streaming` on the generated demo model).
#[derive(Parser, Debug)]
#[command(name = "ds4", version, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: run::Args,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print a GGUF file's metadata, tensor table and DS4 layout.
    Inspect(inspect::Args),
    /// Write one tensor's bytes (or one expert's slice) to stdout.
    Cat(cat::Args),
    /// Write a deterministic DS4-layout GGUF (tiny, demo or full flash shape).
    GenModel(gen_model::Args),
    /// Generate the demo model if needed and stream its experts through the engine (the main
    /// job on the embedded default).
    Demo(demo::Args),
    /// Print the memory plan of a run: device lines with their sources, the largest context
    /// and the expert cache size (exit 1 when it does not fit).
    Plan(plan::Args),
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

/// The error chain printer (`a: b: c`), shared with the C ABI: see [`ds4_stream::errors`].
pub use ds4_stream::errors::chain;

/// The clap value parser of a library [`Choice`] (`--scale`, `--holes`, `--quant`,
/// `--platform`): accepts exactly its names and lists them with their helps in `--help`, as a
/// `ValueEnum` would (the library has no clap dependency to derive one).
pub fn choice<T: Choice + Clone + Send + Sync>() -> impl clap::builder::TypedValueParser<Value = T>
{
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser as _};
    PossibleValuesParser::new(
        T::ALL
            .iter()
            .map(|c| PossibleValue::new(c.name()).help(c.help())),
    )
    .map(|name| T::from_name(&name).expect("clap accepted only the choice's names"))
}

/// True when an IO error is a broken pipe (the reader went away: not our failure).
pub fn is_broken_pipe(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

/// Writes `s` to stdout and flushes. `Ok(true)`: written; `Ok(false)`: the reader went away
/// (`ds4 … | head`), which is success, and the caller should stop producing output. Any other
/// failure (a full disk behind `>`) is a runtime error. `println!` would panic instead.
pub fn out(s: &str) -> Result<bool, CliError> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(s.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(true),
        Err(e) if is_broken_pipe(&e) => Ok(false),
        Err(e) => Err(CliError::runtime(format!("writing to stdout: {e}"))),
    }
}

/// One line for a clap error of program `prog`: its message with line breaks folded (clap
/// lists missing arguments on lines of their own), then the usage line, so usage errors keep
/// the one-line `PROG: error: …` contract. Shared by `ds4`, `ds4-bench` and `ds4-stress`.
pub fn usage_error_line(prog: &str, e: &clap::Error) -> String {
    let text = e.render().to_string();
    let usage = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))
        .map(|u| format!(" (usage: {u})"))
        .unwrap_or_default();
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // The rendered text is the whole help: say what is missing instead.
        return format!("missing command{usage}; see {prog} --help");
    }
    let first = text.split("\n\n").next().unwrap_or_default();
    let msg = first.split_whitespace().collect::<Vec<_>>().join(" ");
    let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
    format!("{msg}{usage}")
}

/// What a program does with clap's refusal to parse its arguments: a usage error is one
/// `PROG: error: …` line on stderr and exit 2; `--help` / `--version` go to stdout, exit 0
/// (1 when stdout fails, other than a broken pipe).
pub fn clap_exit(prog: &str, e: &clap::Error) -> ExitCode {
    if e.use_stderr() {
        let _ = writeln!(
            std::io::stderr().lock(),
            "{prog}: error: {}",
            usage_error_line(prog, e)
        );
        return ExitCode::from(2);
    }
    match e.print() {
        Err(err) if !is_broken_pipe(&err) => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    }
}

/// Prints `ds4: error: {msg}` on stderr. Ignores a failing stderr: there is nowhere left to
/// report it, and `eprintln!` would panic (exit 101) instead of returning our exit code.
fn print_error(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "ds4: error: {msg}");
}

/// Entry point of the `ds4` binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return clap_exit("ds4", &e),
    };
    let r = match cli.command {
        None => run::run(cli.run),
        Some(Command::Inspect(a)) => inspect::run(a),
        Some(Command::Cat(a)) => cat::run(a),
        Some(Command::GenModel(a)) => gen_model::run(a),
        Some(Command::Demo(a)) => demo::run(a),
        Some(Command::Plan(a)) => plan::run(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(&e.message);
            ExitCode::from(e.code)
        }
    }
}
