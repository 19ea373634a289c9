//! The idem side of the Powertools comparison (`bench/powertools/run.sh`, issue 3 item 11):
//! N distinct first calls, then N replays of the same keys, sequential, through an async
//! `#[idempotent]` tool on the Redis store, in this one process.
//!
//! For each phase it resets the server's statistics (`CONFIG RESETSTAT`), times the N calls,
//! reads `INFO commandstats`, and prints one JSON line with the wall time per call, the
//! store's own round-trip count per call ([`idem_agent::Store::round_trips`]) and the commands
//! Redis counted (the `CONFIG RESETSTAT` itself excluded; `INFO` does not count itself).
//! The keys live under a fresh prefix, deleted at the end.
//!
//! ```sh
//! cargo run --release --features redis --example redis_workload -- \
//!     --url redis://127.0.0.1:6379 --n 2000
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use idem_agent::{idempotent, CallContext, Engine, RedisStore, Store, SystemClock, ToolError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    refund_id: String,
    amount_cents: u64,
}

/// The same tool as the Powertools side: a refund keyed by the whole order.
#[idempotent(dispatch = false, ttl = "1h")]
async fn send_refund(
    ctx: &CallContext,
    order_id: &str,
    amount_cents: u64,
    currency: &str,
) -> Result<Receipt, ToolError> {
    let _ = (ctx, currency);
    Ok(Receipt {
        refund_id: format!("re_{order_id}"),
        amount_cents,
    })
}

struct Options {
    url: String,
    n: u64,
    prefix: String,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        url: "redis://127.0.0.1:6379".to_owned(),
        n: 2000,
        prefix: format!(
            "idem-cmp:{:032x}:",
            idem_agent::store::OwnerToken::random().as_u128()
        ),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => options.url = value,
            "--n" => {
                options.n = value
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("--n must be a positive integer, got {value:?}"))?
            }
            "--prefix" => options.prefix = value,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(options)
}

/// Per-command `calls=` of `INFO commandstats`.
async fn commandstats(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<BTreeMap<String, u64>, String> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .map_err(|e| format!("INFO commandstats: {e}"))?;
    let mut calls = BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let count = fields
            .split(',')
            .find_map(|field| field.strip_prefix("calls="))
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| format!("unreadable commandstats line {line:?}"))?;
        if name != "config|resetstat" {
            calls.insert(name.to_owned(), count);
        }
    }
    Ok(calls)
}

async fn run(options: Options) -> Result<serde_json::Value, String> {
    let store = RedisStore::connect(&options.url)
        .await
        .map_err(|e| e.to_string())?
        .with_prefix(options.prefix.clone());
    let store: Arc<dyn Store> = Arc::new(store);
    let engine = Engine::from_shared(store.clone(), Arc::new(SystemClock));
    let ctx = CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_powertools_cmp");
    let client = redis::Client::open(options.url.as_str()).map_err(|e| e.to_string())?;
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let ids: Vec<String> = (0..options.n).map(|i| format!("ord_{i:08}")).collect();
    // Warm-up on other keys: the scripts are loaded, the connection is up.
    for i in 0..2 {
        let id = format!("warm_{i}");
        send_refund(&ctx, &id, 1, "EUR")
            .await
            .map_err(|e| e.to_string())?;
        send_refund(&ctx, &id, 1, "EUR")
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut phases = serde_json::Map::new();
    for phase in ["first", "replay"] {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut admin)
            .await
            .map_err(|e| format!("CONFIG RESETSTAT: {e}"))?;
        let before = store.round_trips().ok_or("the store does not count")?;
        let start = Instant::now();
        for id in &ids {
            let receipt = send_refund(&ctx, id, 129_900, "EUR")
                .await
                .map_err(|e| e.to_string())?;
            if receipt.refund_id != format!("re_{id}") {
                return Err(format!("wrong receipt for {id}: {receipt:?}"));
            }
        }
        let elapsed = start.elapsed();
        let round_trips = store.round_trips().ok_or("the store does not count")? - before;
        let stats = commandstats(&mut admin).await?;
        let status = ctx.last_outcome().map(|o| format!("{:?}", o.status));
        let n = options.n as f64;
        phases.insert(
            phase.to_owned(),
            serde_json::json!({
                "us_per_call": elapsed.as_secs_f64() * 1e6 / n,
                "round_trips_per_call_counter": round_trips as f64 / n,
                "commandstats_calls_per_call": stats.values().sum::<u64>() as f64 / n,
                "commandstats": stats,
                "last_status": status,
            }),
        );
    }
    // Clean up the prefix.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", options.prefix))
        .query_async(&mut admin)
        .await
        .map_err(|e| e.to_string())?;
    for chunk in keys.chunks(1000) {
        let _: u64 = redis::cmd("DEL")
            .arg(chunk)
            .query_async(&mut admin)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(serde_json::json!({
        "impl": "idem",
        "n": options.n,
        "prefix": options.prefix,
        "phases": phases,
    }))
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("redis_workload: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redis_workload: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(options)) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("redis_workload: {e}");
            ExitCode::FAILURE
        }
    }
}
