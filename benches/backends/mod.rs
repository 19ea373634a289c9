//! The store backends the benchmarks run on, each with its clean-up: memory always; SQLite
//! (a file in a temporary directory), Redis and PostgreSQL when the root package's features
//! `sqlite`, `redis`, `postgres` are on. Redis and PostgreSQL take their servers from
//! `IDEM_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`) and `IDEM_TEST_POSTGRES_URL`
//! (default `postgres://postgres@127.0.0.1:5432/test`), use a fresh key prefix
//! (`idem-bench:<uuid>:`) / schema (`idem_bench_<hex>`) per run, and delete it when the
//! backend is dropped. `IDEM_BENCH_STORES=redis,postgres` keeps only the named backends.

use std::sync::Arc;

use tokio::runtime::Runtime;

use idem_agent::{MemoryStore, Store};

/// One backend under test: its store, and whatever cleans it up when dropped.
pub struct Backend {
    pub name: &'static str,
    pub store: Arc<dyn Store>,
    _cleanup: Option<Box<dyn std::any::Any>>,
}

/// The backends this build has, filtered by `IDEM_BENCH_STORES`. Drop them inside
/// `runtime`'s lifetime (the network stores' connections belong to it).
pub fn backends(runtime: &Runtime) -> Vec<Backend> {
    let wanted = std::env::var("IDEM_BENCH_STORES").ok();
    all(runtime)
        .into_iter()
        .filter(|b| {
            wanted
                .as_deref()
                .is_none_or(|w| w.split(',').any(|name| name.trim() == b.name))
        })
        .collect()
}

fn all(runtime: &Runtime) -> Vec<Backend> {
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
        let store = idem_agent::SqliteStore::open(dir.join("bench.sqlite3")).expect("open SQLite");
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
            .block_on(idem_agent::RedisStore::connect(&url))
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
        let store =
            idem_agent::PostgresStore::with_schema(&url, &schema).expect("a PostgreSQL URL");
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
    format!("{:032x}", idem_agent::store::OwnerToken::random().as_u128())
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
