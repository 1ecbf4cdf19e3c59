//! `ds4 gen`. PLACEHOLDER (skeleton).

use super::{CliError, CliResult};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> CliResult {
    Err(CliError::runtime("`ds4 gen` is not implemented yet"))
}
