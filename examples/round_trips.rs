//! Round trips per operation on SQLite, PostgreSQL and Redis, counted by the store
//! (`Store::round_trips`) and, independently, by the server (issue 17's "Done when").
//!
//! ```text
//! cargo run --example round_trips --features sqlite,postgres,redis   # --release: same counts
//! ```
//!
//! Per store, on a fresh file / schema (`idem_schema=`) / key prefix (`idem_prefix=`),
//! removed at the end: the first call and the replay of a new store in this process
//! (cold: schema set-up, statements not yet prepared, scripts maybe unknown to the
//! server), one warm-up round of every operation, then N of each, warm: first call (claim +
//! complete), replay, a call whose body ends with an outcome-unknown error (claim + mark
//! unknown), a decision on it (`Engine::resolve`: read and transition),
//! a history read (`Engine::history`) and a replay of the decided key; then, for a tool that
//! requires approval (A1–A4), the first call's request (claim and transition), a person's
//! approval (`Engine::approve`: read, history, transition), the approved run (claim,
//! transition, complete) and its replay. It prints, per operation, the store's counter per
//! call and the server's count per call, and exits with status 1 when a warm counter differs
//! from 2, 1, 2, 2, 1, 1, 2, 3, 3, 1 respectively.
//!
//! Server counts, measured beside the counter, not by it:
//! - **Redis**: `INFO commandstats` read before and after each phase (the delta of every
//!   command, those run inside scripts included; `CONFIG RESETSTAT` is never sent), and a
//!   `MONITOR` connection that attributes each command to the connection that sent it: the
//!   round trips are the commands sent by the store's own connections (those that named a
//!   key under its prefix). The commandstats delta is marked `clean` when `MONITOR` saw no
//!   command from another client during the phase, else it includes theirs.
//! - **PostgreSQL**: the delta of `pg_stat_statements.calls` (statements executed in this
//!   database, the harness's own reads excluded) when the extension can be read, which needs
//!   it in `shared_preload_libraries` and created in the database; else "unavailable".
//!   Prepares are not executions, and a batch of statements sent as one request counts
//!   each: cold figures differ from the counter by both (see `Store::round_trips`).
//! - **SQLite** has no server: its counter is its statement count.
//!
//! Environment: `IDEM_RT_STORES=sqlite,redis` keeps only those stores (all three by
//! default); `IDEM_RT_N` calls per warm phase (default 100); `IDEM_TEST_REDIS_URL` (default
//! `redis://127.0.0.1:6379`), `IDEM_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). `pg_stat_statements` counts every client of
//! the database: run nothing else against it meanwhile. On Redis, quote commandstats only
//! for phases marked `clean`; the `MONITOR` count is the store's own whatever else runs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use idem_agent::resolve::{Decision, Resolution, Resolved};
use idem_agent::{idempotent, CallContext, Engine, IdempotencyKey, ToolError};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Receipt {
    refund_id: String,
    amount_cents: u64,
}

#[idempotent(dispatch = false)]
async fn send_refund(order_id: &str, amount_cents: u64) -> Result<Receipt, ToolError> {
    Ok(Receipt {
        refund_id: format!("re_{order_id}"),
        amount_cents,
    })
}

/// The bank timed out after the request was sent: the key is marked outcome unknown.
#[idempotent(dispatch = false)]
async fn send_refund_unsure(order_id: &str, amount_cents: u64) -> Result<Receipt, ToolError> {
    let _ = (order_id, amount_cents);
    Err(ToolError::outcome_unknown("bank timed out"))
}

/// A refund a person approves first (A1–A4).
#[idempotent(dispatch = false, require_approval)]
async fn send_refund_approved(order_id: &str, amount_cents: u64) -> Result<Receipt, ToolError> {
    Ok(Receipt {
        refund_id: format!("re_{order_id}"),
        amount_cents,
    })
}

type Fail = Box<dyn std::error::Error>;

fn fresh_hex() -> String {
    format!("{:032x}", idem_agent::store::OwnerToken::random().as_u128())
}

/// What the server saw during one phase: per command or statement, its calls.
#[derive(Default)]
struct Seen {
    /// `INFO commandstats` or `pg_stat_statements` delta, `None` when unavailable.
    stats: Option<BTreeMap<String, u64>>,
    /// Redis: commands sent by the store's connections, by name (`MONITOR`).
    sent: Option<BTreeMap<String, u64>>,
    /// Redis: commands `MONITOR` saw from other clients during the phase.
    foreign: u64,
}

/// The server side of a store: how to read its counters.
enum Server {
    None,
    Redis {
        conn: redis::aio::MultiplexedConnection,
        lines: Arc<Mutex<Vec<String>>>,
        prefix: String,
        store_addrs: BTreeSet<String>,
        marks: u64,
    },
    Postgres {
        client: tokio_postgres::Client,
        error: Option<String>,
    },
}

impl Server {
    async fn redis(url: &str, prefix: &str) -> Result<Server, Fail> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut monitor = client
            .get_async_monitor()
            .await?
            .into_on_message::<String>();
        let sink = lines.clone();
        tokio::spawn(async move {
            while let Some(line) = monitor.next().await {
                sink.lock().expect("monitor lines").push(line);
            }
        });
        Ok(Server::Redis {
            conn,
            lines,
            prefix: prefix.to_owned(),
            store_addrs: BTreeSet::new(),
            marks: 0,
        })
    }

    async fn postgres(url: &str) -> Result<Server, Fail> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let error = client
            .query_one("SELECT count(*) FROM pg_stat_statements", &[])
            .await
            .err()
            .map(|e| {
                e.as_db_error()
                    .map_or(e.to_string(), |d| d.message().to_owned())
            });
        Ok(Server::Postgres { client, error })
    }

    /// The counters now; for Redis also a `MONITOR` mark that ends the previous phase.
    async fn snapshot(&mut self) -> Result<Option<BTreeMap<String, u64>>, Fail> {
        match self {
            Server::None => Ok(None),
            Server::Redis {
                conn, lines, marks, ..
            } => {
                *marks += 1;
                let mark = format!("idem-round-trips-mark-{marks}");
                let _: String = redis::cmd("ECHO").arg(&mark).query_async(conn).await?;
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async(conn)
                    .await?;
                // Wait until MONITOR has passed the mark: every earlier command is in.
                let deadline = Instant::now() + Duration::from_secs(5);
                let shown = format!("{mark}\"");
                while !lines
                    .lock()
                    .expect("lines")
                    .iter()
                    .any(|l| l.ends_with(&shown))
                {
                    if Instant::now() > deadline {
                        return Err("MONITOR did not show the phase mark".into());
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let mut stats = BTreeMap::new();
                for line in info.lines() {
                    let Some((name, rest)) = line
                        .strip_prefix("cmdstat_")
                        .and_then(|l| l.split_once(':'))
                    else {
                        continue;
                    };
                    let calls = rest
                        .split(',')
                        .find_map(|kv| kv.strip_prefix("calls="))
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    stats.insert(name.to_owned(), calls);
                }
                Ok(Some(stats))
            }
            Server::Postgres { client, error } => {
                if error.is_some() {
                    return Ok(None);
                }
                let rows = client
                    .query(
                        "SELECT regexp_replace(query, '\\s+', ' ', 'g'), sum(calls)::int8 \
                         FROM pg_stat_statements \
                         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                           AND query NOT LIKE '%pg_stat_statements%' GROUP BY 1",
                        &[],
                    )
                    .await?;
                Ok(Some(
                    rows.iter()
                        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64))
                        .collect(),
                ))
            }
        }
    }

    /// What happened between two snapshots (`before` was taken at mark `marks - 1`).
    fn seen(
        &mut self,
        before: Option<BTreeMap<String, u64>>,
        after: Option<BTreeMap<String, u64>>,
    ) -> Seen {
        let stats = before.zip(after).map(|(before, after)| {
            after
                .into_iter()
                .filter_map(|(name, calls)| {
                    let delta = calls - before.get(&name).copied().unwrap_or(0);
                    let own = matches!(name.as_str(), "info" | "echo" | "monitor");
                    (delta > 0 && !own).then_some((name, delta))
                })
                .collect()
        });
        let Server::Redis {
            lines,
            prefix,
            store_addrs,
            marks,
            ..
        } = self
        else {
            return Seen {
                stats,
                ..Seen::default()
            };
        };
        let (start, end) = (
            format!("idem-round-trips-mark-{}\"", *marks - 1),
            format!("idem-round-trips-mark-{marks}\""),
        );
        let lines = lines.lock().expect("lines");
        let window: Vec<(&str, &str, &str)> = lines
            .iter()
            .skip_while(|l| !l.ends_with(&start))
            .skip(1)
            .take_while(|l| !l.ends_with(&end))
            .filter_map(|l| parse_monitor_line(l))
            .collect();
        // The store's connections: those that sent a key under its prefix.
        let quoted = format!("\"{prefix}");
        for (source, _, args) in &window {
            if *source != "lua" && args.contains(&quoted) {
                store_addrs.insert((*source).to_owned());
            }
        }
        let mut sent = BTreeMap::new();
        let mut foreign = 0;
        for (source, command, _) in &window {
            if store_addrs.contains(*source) {
                *sent.entry(command.to_lowercase()).or_insert(0) += 1;
            } else if *source != "lua" && !matches!(*command, "INFO" | "info" | "ECHO" | "echo") {
                foreign += 1;
            }
        }
        Seen {
            stats,
            sent: Some(sent),
            foreign,
        }
    }
}

/// `1733338000.123456 [0 127.0.0.1:54321] "EVALSHA" "…" …` → (source, command, the rest).
fn parse_monitor_line(line: &str) -> Option<(&str, &str, &str)> {
    let (_, rest) = line.split_once(" [")?;
    let (inside, rest) = rest.split_once("] ")?;
    let source = inside.split_once(' ')?.1;
    let rest = rest.strip_prefix('"')?;
    let (command, args) = rest.split_once('"')?;
    Some((source, command, args))
}

/// One store under test and how to remove what it wrote.
struct Target {
    name: &'static str,
    locator: String,
    server: Server,
    cleanup: Cleanup,
}

enum Cleanup {
    Dir(std::path::PathBuf),
    RedisPrefix(String, String),
    PostgresSchema(String, String),
}

async fn targets(wanted: &[String]) -> Result<Vec<Target>, Fail> {
    let mut targets = Vec::new();
    let hex = fresh_hex();
    if wanted.iter().any(|w| w == "sqlite") {
        let dir = std::env::temp_dir().join(format!("idem-rt-{hex}"));
        std::fs::create_dir_all(&dir)?;
        targets.push(Target {
            name: "sqlite",
            locator: format!("sqlite:{}", dir.join("rt.sqlite3").display()),
            server: Server::None,
            cleanup: Cleanup::Dir(dir),
        });
    }
    if wanted.iter().any(|w| w == "postgres") {
        let url = std::env::var("IDEM_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let schema = format!("idem_rt_{hex}");
        let sep = if url.contains('?') { '&' } else { '?' };
        targets.push(Target {
            name: "postgres",
            locator: format!("{url}{sep}idem_schema={schema}"),
            server: Server::postgres(&url).await?,
            cleanup: Cleanup::PostgresSchema(url, schema),
        });
    }
    if wanted.iter().any(|w| w == "redis") {
        let url = std::env::var("IDEM_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let prefix = format!("idem-rt:{hex}:");
        let sep = if url.contains('?') { '&' } else { '?' };
        targets.push(Target {
            name: "redis",
            locator: format!("{url}{sep}idem_prefix={prefix}"),
            server: Server::redis(&url, &prefix).await?,
            cleanup: Cleanup::RedisPrefix(url, prefix),
        });
    }
    Ok(targets)
}

async fn clean_up(cleanup: &Cleanup) -> Result<(), Fail> {
    match cleanup {
        Cleanup::Dir(dir) => std::fs::remove_dir_all(dir)?,
        Cleanup::PostgresSchema(url, schema) => {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
            tokio::spawn(connection);
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .await?;
        }
        Cleanup::RedisPrefix(url, prefix) => {
            let mut conn = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let mut cursor = 0u64;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(format!("{prefix}*"))
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await?;
                if !keys.is_empty() {
                    let _: u64 = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await?;
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
    }
    Ok(())
}

/// The operations measured, each on its own order ids.
#[derive(Clone, Copy, PartialEq)]
enum Op {
    FirstCall,
    Replay,
    Unknown,
    Resolve,
    History,
    ReplayDecided,
    ApprovalRequest,
    Approve,
    ApprovedRun,
    ReplayApproved,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::FirstCall => "first call (claim + complete)",
            Op::Replay => "replay",
            Op::Unknown => "outcome unknown (claim + mark unknown)",
            Op::Resolve => "decision (read + transition)",
            Op::History => "history read",
            Op::ReplayDecided => "replay of a decided key",
            Op::ApprovalRequest => "approval request (claim + transition)",
            Op::Approve => "approval (read + history + transition)",
            Op::ApprovedRun => "approved run (claim + transition + complete)",
            Op::ReplayApproved => "replay of an approved run",
        }
    }

    fn expected(self) -> u64 {
        match self {
            Op::FirstCall | Op::Unknown => 2,
            Op::Resolve | Op::ApprovalRequest => 2,
            Op::Approve | Op::ApprovedRun => 3,
            Op::Replay | Op::History | Op::ReplayDecided | Op::ReplayApproved => 1,
        }
    }
}

/// The calls' context and engine, and the key of each outcome-unknown call by order id.
struct Harness {
    ctx: CallContext,
    engine: Engine,
    unsure: HashMap<String, IdempotencyKey>,
    /// The key of each call that asked for approval, by order id.
    asked: HashMap<String, IdempotencyKey>,
}

async fn run_op(h: &mut Harness, op: Op, id: &str) -> Result<(), Fail> {
    let (ctx, engine) = (&h.ctx, &h.engine);
    let unsure_key = || {
        h.unsure
            .get(id)
            .cloned()
            .ok_or("no outcome-unknown call of this id")
    };
    match op {
        Op::FirstCall | Op::Replay => {
            ctx.run(send_refund(id, 500)).await?;
        }
        Op::Unknown => match ctx.run(send_refund_unsure(id, 500)).await {
            Err(ToolError::OutcomeUnknown(_)) => {
                let key = ctx.last_key().ok_or("no key")?;
                h.unsure.insert(id.to_owned(), key);
            }
            other => {
                return Err(format!("expected the body's outcome unknown, got {other:?}").into())
            }
        },
        Op::Resolve => {
            let receipt = Receipt {
                refund_id: format!("re_{id}"),
                amount_cents: 500,
            };
            let resolution = Resolution::new(Decision::applied(&receipt)?, "round-trips")?;
            match engine.resolve(&unsure_key()?, &resolution).await? {
                Resolved::Decided(_) => {}
                other => return Err(format!("expected a decision, got {other:?}").into()),
            }
        }
        Op::History => {
            let history = engine.history(&unsure_key()?).await?.ok_or("no history")?;
            if history.entries.len() != 3 {
                return Err(format!("expected 3 history entries, got {history:?}").into());
            }
        }
        Op::ReplayDecided => {
            let receipt = ctx.run(send_refund_unsure(id, 500)).await?;
            if receipt.refund_id != format!("re_{id}") {
                return Err("the decided outcome was not replayed".into());
            }
        }
        Op::ApprovalRequest => match ctx.run(send_refund_approved(id, 500)).await {
            Err(ToolError::Idem(idem_agent::Error::AwaitingApproval { .. })) => {
                let key = ctx.last_key().ok_or("no key")?;
                h.asked.insert(id.to_owned(), key);
            }
            other => return Err(format!("expected AwaitingApproval, got {other:?}").into()),
        },
        Op::Approve => {
            let key = h.asked.get(id).cloned().ok_or("no request of this id")?;
            let approval = idem_agent::approval::Approval::new("round-trips")?;
            match engine.approve(&key, &approval).await? {
                Resolved::Decided(_) => {}
                other => return Err(format!("expected an approval, got {other:?}").into()),
            }
        }
        Op::ApprovedRun | Op::ReplayApproved => {
            let receipt = ctx.run(send_refund_approved(id, 500)).await?;
            if receipt.refund_id != format!("re_{id}") {
                return Err("the approved run's outcome is not its own".into());
            }
        }
    }
    Ok(())
}

fn per_call(map: &BTreeMap<String, u64>, n: u64) -> String {
    if map.is_empty() {
        return "nothing".to_owned();
    }
    let total: u64 = map.values().sum();
    let parts: Vec<String> = map
        .iter()
        .map(|(name, calls)| {
            let name: String = name.chars().take(70).collect();
            format!("{:.2} {name}", *calls as f64 / n as f64)
        })
        .collect();
    format!("{:.2} = {}", total as f64 / n as f64, parts.join(" + "))
}

/// Runs `op` for each id and prints the store's and the server's counts per call. Returns
/// the counter per call.
async fn measure(
    target: &mut Target,
    h: &mut Harness,
    label: &str,
    op: Op,
    ids: &[String],
) -> Result<Option<f64>, Fail> {
    let before_server = target.server.snapshot().await?;
    let before = h.engine.store().round_trips();
    for id in ids {
        run_op(h, op, id).await?;
    }
    let after = h.engine.store().round_trips();
    let after_server = target.server.snapshot().await?;
    let seen = target.server.seen(before_server, after_server);
    let n = ids.len() as u64;
    let counter = before.zip(after).map(|(b, a)| (a - b) as f64 / n as f64);
    println!(
        "{:<9} {label:<48} n={n:<4} counter/call {}",
        target.name,
        counter.map_or("-".to_owned(), |c| format!("{c:.2}"))
    );
    match (&target.server, &seen.stats) {
        (Server::None, _) => {
            println!("          server: none (SQLite: the counter is the statement count)")
        }
        (Server::Postgres { error: Some(e), .. }, _) => {
            println!("          server: pg_stat_statements unavailable: {e}")
        }
        (Server::Postgres { .. }, Some(stats)) => {
            println!(
                "          server: pg_stat_statements calls/call {}",
                per_call(stats, n)
            )
        }
        (Server::Redis { .. }, Some(stats)) => {
            if let Some(sent) = &seen.sent {
                println!(
                    "          server: MONITOR, sent by the store/call {}",
                    per_call(sent, n)
                );
            }
            let clean = if seen.foreign == 0 {
                "clean: no other client's command during the phase".to_owned()
            } else {
                format!(
                    "NOT clean: {} commands of other clients included",
                    seen.foreign
                )
            };
            println!(
                "          server: commandstats delta/call ({clean}) {}",
                per_call(stats, n)
            );
        }
        _ => {}
    }
    Ok(counter)
}

async fn run_store(target: &mut Target, n: usize) -> Result<bool, Fail> {
    let engine = Engine::from_locator(&target.locator)?;
    let ctx = CallContext::new()
        .with_engine(engine.clone())
        .with_conversation("conv_round_trips");
    let h = &mut Harness {
        ctx,
        engine,
        unsure: HashMap::new(),
        asked: HashMap::new(),
    };
    let ids = |tag: &str, count: usize| -> Vec<String> {
        (0..count).map(|i| format!("ord_{tag}_{i:05}")).collect()
    };
    let cold = ids("cold", 1);
    measure(
        target,
        h,
        "cold: first call of the process",
        Op::FirstCall,
        &cold,
    )
    .await?;
    measure(target, h, "cold: its replay", Op::Replay, &cold).await?;
    for op in [
        Op::Unknown,
        Op::Resolve,
        Op::History,
        Op::ReplayDecided,
        Op::ApprovalRequest,
        Op::Approve,
        Op::ApprovedRun,
        Op::ReplayApproved,
    ] {
        let label = format!("cold: first {}", op.label());
        measure(target, h, &label, op, &cold).await?;
    }
    // Warm-up, not counted: every operation on two more keys (statements prepared).
    let warm = ids("warm", 2);
    for op in [
        Op::FirstCall,
        Op::Replay,
        Op::Unknown,
        Op::Resolve,
        Op::History,
        Op::ReplayDecided,
        Op::ApprovalRequest,
        Op::Approve,
        Op::ApprovedRun,
        Op::ReplayApproved,
    ] {
        for id in &warm {
            run_op(h, op, id).await?;
        }
    }
    let main = ids("n", n);
    let mut as_expected = true;
    for op in [
        Op::FirstCall,
        Op::Replay,
        Op::Unknown,
        Op::Resolve,
        Op::History,
        Op::ReplayDecided,
        Op::ApprovalRequest,
        Op::Approve,
        Op::ApprovedRun,
        Op::ReplayApproved,
    ] {
        let counter = measure(target, h, op.label(), op, &main).await?;
        if counter.is_some_and(|c| c != op.expected() as f64) {
            println!(
                "          UNEXPECTED: the contract says {} per call",
                op.expected()
            );
            as_expected = false;
        }
    }
    Ok(as_expected)
}

async fn run() -> Result<bool, Fail> {
    let wanted: Vec<String> = std::env::var("IDEM_RT_STORES")
        .unwrap_or_else(|_| "sqlite,postgres,redis".to_owned())
        .split(',')
        .map(|s| s.trim().to_owned())
        .collect();
    let n: usize = std::env::var("IDEM_RT_N").map_or(Ok(100), |v| v.parse())?;
    let mut all_expected = true;
    for mut target in targets(&wanted).await? {
        println!("== {} ({})", target.name, target.locator);
        let result = run_store(&mut target, n).await;
        let cleaned = clean_up(&target.cleanup).await;
        all_expected &= result?;
        cleaned?;
    }
    Ok(all_expected)
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("round_trips: {e}");
            ExitCode::from(2)
        }
    }
}
