//! First call and replay latency per store backend, through an async `#[idempotent]` tool
//! with an explicit `&CallContext` and the system clock (issue 3, item 11), and the store
//! round trips each costs (issue 3, item 4), printed once per backend.
//!
//! Memory always; SQLite (a file in a temporary directory), Redis and PostgreSQL when the
//! root package's features `sqlite`, `redis`, `postgres` are on. Redis and PostgreSQL take
//! their servers from `IDEM_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`) and
//! `IDEM_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`), use a fresh
//! key prefix (`idem-bench:<uuid>:`) / schema (`idem_bench_<hex>`) per run, and delete it
//! at the end.
//!
//! Run: `cargo bench --bench stores --features idem/sqlite,idem/redis,idem/postgres`.
//! `IDEM_BENCH_STORES=redis,postgres` keeps only the named backends (all by default).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

use idem::{idempotent, CallContext, Engine, MemoryStore, Store, SystemClock, ToolError};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Receipt {
    refund_id: String,
    amount_cents: u64,
}

#[idempotent(dispatch = false)]
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

async fn call(ctx: &CallContext, order_id: &str) -> Receipt {
    send_refund(ctx, order_id, 129_900, "EUR")
        .await
        .expect("the store answers")
}

/// Order ids never used before in this process.
fn fresh_ids(n: u64) -> Vec<String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let start = NEXT.fetch_add(n, Ordering::Relaxed);
    (start..start + n).map(|i| format!("ord_{i:012}")).collect()
}

/// One backend under test: its store, and whatever cleans it up when dropped.
struct Backend {
    name: &'static str,
    store: Arc<dyn Store>,
    _cleanup: Option<Box<dyn std::any::Any>>,
}

fn context(store: &Arc<dyn Store>) -> CallContext {
    let engine = Engine::from_shared(store.clone(), Arc::new(SystemClock));
    CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_bench_stores")
}

fn backends(runtime: &Runtime) -> Vec<Backend> {
    let _ = runtime;
    #[allow(unused_mut)]
    let mut all = vec![Backend {
        name: "memory",
        store: Arc::new(MemoryStore::new()),
        _cleanup: None,
    }];
    #[cfg(feature = "sqlite")]
    {
        let dir = tempfile_dir();
        let store = idem::SqliteStore::open(dir.join("bench.sqlite3")).expect("open SQLite");
        all.push(Backend {
            name: "sqlite",
            store: Arc::new(store),
            _cleanup: Some(Box::new(RemoveDir(dir))),
        });
    }
    #[cfg(feature = "redis")]
    {
        let url = std::env::var("IDEM_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let prefix = format!("idem-bench:{}:", uuid_hex());
        let store = runtime
            .block_on(idem::RedisStore::connect(&url))
            .expect("connect to Redis")
            .with_prefix(prefix.clone());
        all.push(Backend {
            name: "redis",
            store: Arc::new(store),
            _cleanup: Some(Box::new(redis_cleanup::Prefix { url, prefix })),
        });
    }
    #[cfg(feature = "postgres")]
    {
        let url = std::env::var("IDEM_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let schema = format!("idem_bench_{}", uuid_hex());
        let store = idem::PostgresStore::with_schema(&url, &schema).expect("a PostgreSQL URL");
        all.push(Backend {
            name: "postgres",
            store: Arc::new(store),
            _cleanup: Some(Box::new(postgres_cleanup::Schema { url, schema })),
        });
    }
    all
}

#[cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]
fn uuid_hex() -> String {
    format!("{:032x}", idem::store::OwnerToken::random().as_u128())
}

#[cfg(feature = "sqlite")]
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("idem-bench-{}", uuid_hex()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

#[cfg(feature = "sqlite")]
struct RemoveDir(std::path::PathBuf);

#[cfg(feature = "sqlite")]
impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(feature = "redis")]
mod redis_cleanup {
    /// Deletes every key under `prefix` when dropped.
    pub struct Prefix {
        pub url: String,
        pub prefix: String,
    }

    impl Drop for Prefix {
        fn drop(&mut self) {
            let Ok(client) = redis::Client::open(self.url.as_str()) else {
                return;
            };
            let Ok(mut conn) = client.get_connection() else {
                return;
            };
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{}*", self.prefix))
                .query(&mut conn)
                .unwrap_or_default();
            for chunk in keys.chunks(1000) {
                let _: Result<usize, _> = redis::cmd("DEL").arg(chunk).query(&mut conn);
            }
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres_cleanup {
    /// Drops `schema` (and its tables) when dropped.
    pub struct Schema {
        pub url: String,
        pub schema: String,
    }

    impl Drop for Schema {
        fn drop(&mut self) {
            let (url, sql) = (
                self.url.clone(),
                format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema),
            );
            let _ = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                runtime.block_on(async move {
                    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                        .await
                        .ok()?;
                    let driver = tokio::spawn(connection);
                    let done = client.batch_execute(&sql).await.ok();
                    drop(client);
                    let _ = driver.await;
                    done
                })
            })
            .join();
        }
    }
}

/// The round trips of one first call and one replay of a new key, after a warm-up call.
fn round_trips_per_call(runtime: &Runtime, backend: &Backend) -> Option<(u64, u64)> {
    let ctx = context(&backend.store);
    runtime.block_on(async {
        let [warm, id] = <[String; 2]>::try_from(fresh_ids(2)).ok()?;
        call(&ctx, &warm).await;
        call(&ctx, &warm).await;
        let before = backend.store.round_trips()?;
        call(&ctx, &id).await;
        let after_first = backend.store.round_trips()?;
        call(&ctx, &id).await;
        let after_replay = backend.store.round_trips()?;
        Some((after_first - before, after_replay - after_first))
    })
}

fn stores(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let wanted = std::env::var("IDEM_BENCH_STORES").ok();
    let backends: Vec<Backend> = backends(&runtime)
        .into_iter()
        .filter(|b| {
            wanted
                .as_deref()
                .is_none_or(|w| w.split(',').any(|name| name.trim() == b.name))
        })
        .collect();
    for backend in &backends {
        match round_trips_per_call(&runtime, backend) {
            Some((first, replay)) => println!(
                "round trips per call, {}: first call {first}, replay {replay}",
                backend.name
            ),
            None => println!("round trips per call, {}: not counted", backend.name),
        }
    }
    let mut group = c.benchmark_group("store_first_call");
    for backend in &backends {
        let ctx = context(&backend.store);
        group.bench_function(backend.name, |b| {
            b.iter_custom(|iters| {
                let ids = fresh_ids(iters);
                runtime.block_on(async {
                    let start = Instant::now();
                    for id in &ids {
                        black_box(call(&ctx, id).await);
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
    let mut group = c.benchmark_group("store_replay");
    for backend in &backends {
        let ctx = context(&backend.store);
        let [id] = <[String; 1]>::try_from(fresh_ids(1)).expect("one id");
        runtime.block_on(call(&ctx, &id));
        group.bench_function(backend.name, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(call(&ctx, black_box(&id)).await);
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
    // Clean up inside the runtime's lifetime (the stores' pools and connections).
    runtime.block_on(async move { drop(backends) });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = stores
}
criterion_main!(benches);
