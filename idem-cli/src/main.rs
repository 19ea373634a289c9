//! `idem`: derive the idempotency key of an AI-agent tool call; show, list, purge and count
//! the records idem keeps (contract X). See the crate's README for the command reference.

mod cli;
mod commands;
mod exit;
mod output;
mod secrets;

use std::io::Write;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::cli::Cli;
use crate::commands::{Origins, Report};
use crate::exit::{CliError, Exit};

fn main() -> ExitCode {
    // Usage errors exit 2 naming the option (clap's own status for them); --help and
    // --version exit 0.
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let origins = Origins {
        store: match matches.value_source("store") {
            Some(ValueSource::EnvVariable) => "IDEM_STORE",
            _ => "--store",
        },
    };
    let secrets = cli.store.as_deref().map(secrets::of).unwrap_or_default();
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Store(format!("cannot start the async runtime: {e}")))
        .and_then(|runtime| runtime.block_on(commands::run(cli, origins)));
    let report = match result {
        Ok(report) => report,
        Err(error) => Report {
            stderr: format!("idem: {error}\n"),
            exit: Some(error.exit()),
            ..Report::default()
        },
    };
    print(&report, &secrets);
    report.exit.unwrap_or(Exit::Done).into()
}

/// Writes the report, passwords of the locator replaced by `***` in messages (X4). Standard
/// output is records as the store holds them, printed unchanged. A closed stdout (`idem ls |
/// head`) is not an error.
fn print(report: &Report, secrets: &[String]) {
    let _ = std::io::stdout().lock().write_all(report.stdout.as_bytes());
    let stderr = secrets::scrub(&report.stderr, secrets);
    let _ = std::io::stderr().lock().write_all(stderr.as_bytes());
}
