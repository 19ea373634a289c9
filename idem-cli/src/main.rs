//! `idem`: derive the idempotency key of an AI-agent tool call; show, list, purge and count
//! the records idem keeps (contract X). See the crate's README for the command reference.

mod cli;
mod commands;
mod exit;
mod output;
mod proxy;
mod secrets;

use std::io::Write;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::cli::Cli;
use crate::commands::{Origins, Report};
use crate::exit::{CliError, Exit};

fn main() -> ExitCode {
    // Every password the command line or IDEM_STORE holds, whether or not it reached
    // --store: clap echoes a misplaced locator (`idem postgres://u:pw@h/db ls`) in its
    // errors.
    let secrets = secrets::of_command_line(std::env::args_os(), std::env::var_os("IDEM_STORE"));
    let (matches, cli) = match Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (m, cli)))
    {
        Ok(parsed) => parsed,
        Err(error) => return usage_error(&error, &secrets),
    };
    if let cli::Command::McpProxy(args) = &cli.command {
        return proxy::main(proxy::Options {
            store: cli.store.as_deref(),
            namespace: cli.namespace.as_deref(),
            config: args.config.as_deref(),
            json_logs: args.json,
            transport: match (&args.listen, &args.upstream) {
                (Some(listen), Some(upstream)) => proxy::Transport::Http {
                    listen: *listen,
                    upstream: upstream.clone(),
                },
                _ => proxy::Transport::Stdio {
                    command: args.command.clone(),
                },
            },
        });
    }
    let origins = Origins {
        store: match matches.value_source("store") {
            Some(ValueSource::EnvVariable) => "IDEM_STORE",
            _ => "--store",
        },
    };
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

/// A command line clap refused: `--help` and `--version` print as clap prints them (exit 0);
/// a usage error is clap's message after `idem: `, passwords scrubbed, exit 2 (X3, X4).
fn usage_error(error: &clap::Error, secrets: &[String]) -> ExitCode {
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        // Help and version hold no argument: printed as clap prints them.
        error.exit();
    }
    let text = error.render().to_string();
    let stderr = match error.kind() {
        // The help, printed because a subcommand is missing: no prefix before it.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => text,
        _ => format!("idem: {}", text.strip_prefix("error: ").unwrap_or(&text)),
    };
    let report = Report {
        stderr,
        exit: Some(Exit::Usage),
        ..Report::default()
    };
    print(&report, secrets);
    Exit::Usage.into()
}

/// Writes the report, passwords of the command line and `IDEM_STORE` replaced by `***` in messages (X4). Standard
/// output is records as the store holds them, printed unchanged. A closed stdout (`idem ls |
/// head`) is not an error.
fn print(report: &Report, secrets: &[String]) {
    let _ = std::io::stdout().lock().write_all(report.stdout.as_bytes());
    let stderr = secrets::scrub(&report.stderr, secrets);
    let _ = std::io::stderr().lock().write_all(stderr.as_bytes());
}
