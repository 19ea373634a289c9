//! Store locators: the one-line text that names a store, as in `IDEM_STORE=sqlite:agent.db`
//! or `#[idempotent(store = "redis://cache:6379")]` (issue 3: choosing a store without
//! code).
//!
//! ```text
//! memory                                   the in-memory store (feature `memory`)
//! sqlite:PATH                              an SQLite file, created if absent (feature `sqlite`)
//! sqlite::memory:                          a private in-memory SQLite database
//! redis://[user[:password]@]host[:port][/db][?idem_prefix=P]        (feature `redis`)
//! rediss://…[?ssl_ca_certs=CA&ssl_certfile=CERT&ssl_keyfile=KEY]    the same over TLS
//! postgres://user[:password]@host[:port]/database[?…&idem_schema=S] (feature `postgres`)
//! postgresql://…                           the same
//! ```
//!
//! PostgreSQL URLs take libpq's TLS parameters (`sslmode`, `sslrootcert`, `sslcert`,
//! `sslkey`); see `PostgresStore::connect` (feature `postgres`) and contract N1.
//!
//! Surrounding ASCII whitespace is ignored. `idem_prefix` sets the Redis key prefix
//! (default [`DEFAULT_REDIS_PREFIX`]); `idem_schema` the PostgreSQL schema (default
//! [`DEFAULT_POSTGRES_SCHEMA`]); both are removed from the URL before it reaches the client
//! library, and any other `idem_*` parameter is an error. Parsing accepts every backend
//! whatever the build's features; [`StoreLocator::open`] is where a backend whose cargo
//! feature is off becomes [`StoreConfigError::FeatureDisabled`], naming the feature.
//!
//! Passwords never appear in errors or in [`Display`](fmt::Display): they are shown as
//! `***`.
//!
//! ```
//! # extern crate idem_runtime as idem_agent;
//! use idem_agent::store::StoreLocator;
//! let locator: StoreLocator = "redis://:s3cret@cache:6379/0?idem_prefix=billing:".parse()?;
//! assert_eq!(locator.backend(), "redis");
//! assert_eq!(locator.to_string(), "redis://:***@cache:6379/0?idem_prefix=billing:");
//! # Ok::<(), idem_agent::store::StoreConfigError>(())
//! ```

use super::redact::redact_url;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use super::{Store, StoreError, StoreErrorKind};

/// The Redis key prefix when a locator sets none (`idem:`).
pub const DEFAULT_REDIS_PREFIX: &str = "idem:";
/// The PostgreSQL schema when a locator sets none (`idem`).
pub const DEFAULT_POSTGRES_SCHEMA: &str = "idem";

/// A parsed store locator: which backend, and where. See the [module docs](self) for the
/// syntax.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreLocator {
    /// `memory`: one process, forgets on restart.
    Memory,
    /// `sqlite:PATH`: one file; `None` for `sqlite::memory:`.
    Sqlite {
        /// The database file, relative paths from the process's working directory.
        path: Option<PathBuf>,
    },
    /// `redis://…` or `rediss://…`.
    Redis {
        /// The URL as the client library takes it (without `idem_prefix`).
        url: String,
        /// The key prefix.
        prefix: String,
    },
    /// `postgres://…` or `postgresql://…`.
    Postgres {
        /// The URL as the client library takes it (without `idem_schema`).
        url: String,
        /// The schema that holds the table.
        schema: String,
    },
}

/// Why a store locator could not be parsed or its store opened.
///
/// Every variant names the locator as given, with any password replaced by `***`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreConfigError {
    /// The locator is empty (or only whitespace).
    #[error("the store locator{origin} is empty: expected `memory`, `sqlite:PATH`, `redis://…` or `postgres://…`", origin = shown_origin(.origin))]
    Empty {
        /// Where the locator came from (`IDEM_STORE`, a tool's `store = …`), if known.
        origin: Option<String>,
    },
    /// The locator starts with no known scheme.
    #[error("unknown store `{given}`{origin}: expected `memory`, `sqlite:PATH`, `redis://…`, `rediss://…`, `postgres://…` or `postgresql://…`", origin = shown_origin(.origin))]
    UnknownScheme {
        /// The locator.
        given: String,
        /// Where it came from, if known.
        origin: Option<String>,
    },
    /// `sqlite:` with no path.
    #[error("store `{given}`{origin} names no file: write `sqlite:PATH`, or `sqlite::memory:` for a private in-memory database", origin = shown_origin(.origin))]
    MissingPath {
        /// The locator.
        given: String,
        /// Where it came from, if known.
        origin: Option<String>,
    },
    /// An `idem_*` query parameter this backend does not know, or one given twice.
    #[error("store `{given}`{origin}: bad option `{option}`: a Redis URL takes `idem_prefix` once, a PostgreSQL URL `idem_schema` once", origin = shown_origin(.origin))]
    BadOption {
        /// The locator.
        given: String,
        /// The parameter name.
        option: String,
        /// Where it came from, if known.
        origin: Option<String>,
    },
    /// The backend's cargo feature is off in this build.
    #[error("store `{given}`{origin} needs the `{feature}` cargo feature of the idem-agent package, which is off in this build: enable it with `idem-agent = {{ version = \"0.1\", features = [\"{feature}\"] }}` in Cargo.toml", origin = shown_origin(.origin))]
    FeatureDisabled {
        /// The locator.
        given: String,
        /// The cargo feature to enable: `memory`, `sqlite`, `redis` or `postgres`.
        feature: &'static str,
        /// Where it came from, if known.
        origin: Option<String>,
    },
    /// The locator names its store in a way the backend cannot take: a URL its client
    /// library does not parse (a port or Redis database that is not a number, an unknown
    /// connection parameter), or a PostgreSQL schema name that is not a plain lowercase
    /// identifier. Bad input, like [`UnknownScheme`](Self::UnknownScheme): retrying
    /// cannot fix it, and no server was contacted.
    #[error("store `{given}`{origin} is malformed: {message}", origin = shown_origin(.origin))]
    Malformed {
        /// The locator.
        given: String,
        /// Where it came from, if known.
        origin: Option<String>,
        /// The backend's reason, any password replaced by `***`.
        message: String,
    },
    /// The store could not be opened (an unreadable file, no tokio runtime for Redis, …).
    #[error("store `{given}`{origin} could not be opened: {source}", origin = shown_origin(.origin))]
    Open {
        /// The locator.
        given: String,
        /// Where it came from, if known.
        origin: Option<String>,
        /// The backend's error.
        #[source]
        source: StoreError,
    },
    /// An environment variable holds bytes that are not UTF-8.
    #[error("the environment variable {variable} is not valid UTF-8")]
    NotUnicode {
        /// The variable's name.
        variable: String,
    },
}

fn shown_origin(origin: &Option<String>) -> String {
    origin
        .as_deref()
        .map(|o| format!(" (from {o})"))
        .unwrap_or_default()
}

impl StoreConfigError {
    /// The same error, saying where the locator came from (`IDEM_STORE`, `store = … on
    /// send_refund`).
    pub fn from_origin(mut self, from: impl Into<String>) -> Self {
        let from = Some(from.into());
        match &mut self {
            StoreConfigError::Empty { origin }
            | StoreConfigError::UnknownScheme { origin, .. }
            | StoreConfigError::MissingPath { origin, .. }
            | StoreConfigError::BadOption { origin, .. }
            | StoreConfigError::FeatureDisabled { origin, .. }
            | StoreConfigError::Malformed { origin, .. }
            | StoreConfigError::Open { origin, .. } => *origin = from,
            StoreConfigError::NotUnicode { .. } => {}
        }
        self
    }

    /// The error as a [`StoreError`], for callers whose call cannot proceed without the
    /// store: an open failure keeps its backend and kind; every other error is
    /// [`StoreErrorKind::Unsupported`] (retrying cannot fix a configuration).
    pub fn into_store_error(self) -> StoreError {
        match self {
            StoreConfigError::Open { ref source, .. } => {
                StoreError::new(source.backend.clone(), source.kind, self.to_string())
            }
            other => StoreError::new("config", StoreErrorKind::Unsupported, other.to_string()),
        }
    }
}

impl From<StoreConfigError> for StoreError {
    fn from(error: StoreConfigError) -> Self {
        error.into_store_error()
    }
}

impl StoreLocator {
    /// Parses a locator (see the [module docs](self)).
    ///
    /// # Errors
    /// [`StoreConfigError::Empty`], [`StoreConfigError::UnknownScheme`],
    /// [`StoreConfigError::MissingPath`] or [`StoreConfigError::BadOption`], each naming the
    /// locator. A disabled feature is not a parse error (see [`open`](Self::open)).
    pub fn parse(text: &str) -> Result<Self, StoreConfigError> {
        let text = text.trim_matches(|c: char| c.is_ascii_whitespace());
        if text.is_empty() {
            return Err(StoreConfigError::Empty { origin: None });
        }
        if text == "memory" {
            return Ok(StoreLocator::Memory);
        }
        if let Some(path) = text.strip_prefix("sqlite:") {
            return match path {
                "" => Err(StoreConfigError::MissingPath {
                    given: text.to_owned(),
                    origin: None,
                }),
                ":memory:" => Ok(StoreLocator::Sqlite { path: None }),
                path => Ok(StoreLocator::Sqlite {
                    path: Some(PathBuf::from(path)),
                }),
            };
        }
        if text.starts_with("redis://") || text.starts_with("rediss://") {
            let (url, prefix) = take_option(text, "idem_prefix")?;
            return Ok(StoreLocator::Redis {
                url,
                prefix: prefix.unwrap_or_else(|| DEFAULT_REDIS_PREFIX.to_owned()),
            });
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            let (url, schema) = take_option(text, "idem_schema")?;
            return Ok(StoreLocator::Postgres {
                url,
                schema: schema.unwrap_or_else(|| DEFAULT_POSTGRES_SCHEMA.to_owned()),
            });
        }
        Err(StoreConfigError::UnknownScheme {
            given: redact_url(text),
            origin: None,
        })
    }

    /// The backend's name: `memory`, `sqlite`, `redis` or `postgres` (also the name of the
    /// cargo feature it needs).
    pub fn backend(&self) -> &'static str {
        match self {
            StoreLocator::Memory => "memory",
            StoreLocator::Sqlite { .. } => "sqlite",
            StoreLocator::Redis { .. } => "redis",
            StoreLocator::Postgres { .. } => "postgres",
        }
    }

    /// Whether this build has the backend's cargo feature.
    pub fn is_enabled(&self) -> bool {
        match self {
            StoreLocator::Memory => cfg!(feature = "memory"),
            StoreLocator::Sqlite { .. } => cfg!(feature = "sqlite"),
            StoreLocator::Redis { .. } => cfg!(feature = "redis"),
            StoreLocator::Postgres { .. } => cfg!(feature = "postgres"),
        }
    }

    /// Opens the store. SQLite opens the file (creating it and its schema) at once; Redis
    /// and PostgreSQL connect on first use, so an unreachable server is reported by the
    /// first call ([`StoreErrorKind::Unavailable`]), not here.
    ///
    /// # Errors
    /// [`StoreConfigError::FeatureDisabled`] when the backend's feature is off;
    /// [`StoreConfigError::Malformed`] when the URL is malformed (the client library
    /// does not parse it) or the PostgreSQL schema name is invalid;
    /// [`StoreConfigError::Open`] when the store cannot be opened: the file cannot be
    /// created or holds another schema version, or (Redis) there is no tokio runtime in
    /// this context.
    pub fn open(&self) -> Result<Arc<dyn Store>, StoreConfigError> {
        if !self.is_enabled() {
            return Err(StoreConfigError::FeatureDisabled {
                given: self.to_string(),
                feature: self.backend(),
                origin: None,
            });
        }
        self.open_enabled().map_err(|e| self.open_error(e))
    }

    /// As [`open`](Self::open), for inspecting a store that exists (the `idem` command):
    /// nothing is created or upgraded. PostgreSQL opens with
    /// `PostgresStore::connect_existing` (feature `postgres`): its first
    /// operation fails with [`StoreErrorKind::Unsupported`] when the schema or its tables do
    /// not exist or are of another version, and reading needs only `SELECT`. SQLite needs the
    /// file to exist and to hold idem's tables (a file without them is
    /// [`StoreConfigError::Open`], [`StoreErrorKind::Unsupported`], and is left as it was),
    /// at this build's schema version: an older one is reported the same way, not migrated.
    /// Redis and memory open as with [`open`](Self::open): they have no schema.
    ///
    /// # Errors
    /// As [`open`](Self::open), and [`StoreConfigError::Open`] for an SQLite file that does
    /// not exist, holds no idem tables, or holds an older schema.
    #[allow(unreachable_code, unused_variables)]
    pub fn open_existing(&self) -> Result<Arc<dyn Store>, StoreConfigError> {
        if !self.is_enabled() {
            return self.open();
        }
        match self {
            StoreLocator::Postgres { url, schema } => {
                #[cfg(feature = "postgres")]
                return match super::PostgresStore::connect_existing(url, schema) {
                    Ok(store) => Ok(Arc::new(store) as Arc<dyn Store>),
                    Err(
                        e @ (super::PostgresConnectError::InvalidUrl { .. }
                        | super::PostgresConnectError::InvalidSchema { .. }),
                    ) => Err(OpenError::Malformed(e.to_string())),
                    Err(e) => Err(OpenError::Store(e.into())),
                }
                .map_err(|e| self.open_error(e));
            }
            StoreLocator::Sqlite { path: Some(path) } => {
                #[cfg(feature = "sqlite")]
                super::sqlite::check_existing(path).map_err(|e| self.open_error(e.into()))?;
            }
            _ => {}
        }
        self.open()
    }

    /// An open failure as a configuration error naming this locator.
    fn open_error(&self, error: OpenError) -> StoreConfigError {
        match error {
            OpenError::Malformed(message) => StoreConfigError::Malformed {
                given: self.to_string(),
                origin: None,
                message,
            },
            OpenError::Store(source) => StoreConfigError::Open {
                given: self.to_string(),
                origin: None,
                source,
            },
        }
    }

    #[allow(unreachable_code, unused_variables)]
    fn open_enabled(&self) -> Result<Arc<dyn Store>, OpenError> {
        match self {
            StoreLocator::Memory => {
                #[cfg(feature = "memory")]
                return Ok(Arc::new(super::MemoryStore::new()));
            }
            StoreLocator::Sqlite { path } => {
                #[cfg(feature = "sqlite")]
                return match path {
                    Some(path) => super::SqliteStore::open(path),
                    None => super::SqliteStore::open_in_memory(),
                }
                .map(|store| Arc::new(store) as Arc<dyn Store>)
                .map_err(|e| OpenError::Store(e.into()));
            }
            StoreLocator::Redis { url, prefix } => {
                #[cfg(feature = "redis")]
                return match super::RedisStore::connect_lazy(url) {
                    Ok(store) => Ok(Arc::new(store.with_prefix(prefix.clone()))),
                    Err(e @ super::RedisConnectError::InvalidUrl { .. }) => {
                        Err(OpenError::Malformed(e.to_string()))
                    }
                    Err(e) => Err(OpenError::Store(e.into())),
                };
            }
            StoreLocator::Postgres { url, schema } => {
                #[cfg(feature = "postgres")]
                return match super::PostgresStore::with_schema(url, schema) {
                    Ok(store) => Ok(Arc::new(store)),
                    Err(
                        e @ (super::PostgresConnectError::InvalidUrl { .. }
                        | super::PostgresConnectError::InvalidSchema { .. }),
                    ) => Err(OpenError::Malformed(e.to_string())),
                    Err(e) => Err(OpenError::Store(e.into())),
                };
            }
        }
        // Only reached for a backend whose feature is off, which `open` rules out first.
        Err(OpenError::Store(StoreError::new(
            self.backend(),
            StoreErrorKind::Unsupported,
            format!("the `{}` cargo feature is off", self.backend()),
        )))
    }
}

/// Why a backend could not be opened: bad input, or the store's own error.
#[derive(Debug)]
enum OpenError {
    /// The URL or an option is malformed ([`StoreConfigError::Malformed`]). Only the
    /// network backends parse URLs.
    #[cfg_attr(not(any(feature = "postgres", feature = "redis")), allow(dead_code))]
    Malformed(String),
    /// Any other failure ([`StoreConfigError::Open`]).
    Store(StoreError),
}

impl From<StoreError> for OpenError {
    fn from(error: StoreError) -> Self {
        OpenError::Store(error)
    }
}

impl FromStr for StoreLocator {
    type Err = StoreConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        StoreLocator::parse(text)
    }
}

impl fmt::Display for StoreLocator {
    /// The locator in its text form, any password shown as `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocator::Memory => f.write_str("memory"),
            StoreLocator::Sqlite { path: None } => f.write_str("sqlite::memory:"),
            StoreLocator::Sqlite { path: Some(path) } => write!(f, "sqlite:{}", path.display()),
            StoreLocator::Redis { url, prefix } => {
                write_with_option(f, url, "idem_prefix", prefix, DEFAULT_REDIS_PREFIX)
            }
            StoreLocator::Postgres { url, schema } => {
                write_with_option(f, url, "idem_schema", schema, DEFAULT_POSTGRES_SCHEMA)
            }
        }
    }
}

impl fmt::Debug for StoreLocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreLocator({self})")
    }
}

fn write_with_option(
    f: &mut fmt::Formatter<'_>,
    url: &str,
    name: &str,
    value: &str,
    default: &str,
) -> fmt::Result {
    f.write_str(&redact_url(url))?;
    if value != default {
        let separator = if url.contains('?') { '&' } else { '?' };
        write!(f, "{separator}{name}={value}")?;
    }
    Ok(())
}

/// Removes the query parameter `name` from `url` and returns its value; any other `idem_*`
/// parameter, or `name` twice, is an error.
fn take_option(url: &str, name: &str) -> Result<(String, Option<String>), StoreConfigError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut value = None;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, pair_value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == name && value.is_none() {
            value = Some(pair_value.to_owned());
        } else if key.starts_with("idem_") {
            return Err(StoreConfigError::BadOption {
                given: redact_url(url),
                option: key.to_owned(),
                origin: None,
            });
        } else {
            kept.push(pair);
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_backend() {
        assert_eq!(StoreLocator::parse("memory").unwrap(), StoreLocator::Memory);
        assert_eq!(
            StoreLocator::parse(" sqlite:/var/lib/agent/idem.db\n").unwrap(),
            StoreLocator::Sqlite {
                path: Some(PathBuf::from("/var/lib/agent/idem.db"))
            }
        );
        assert_eq!(
            StoreLocator::parse("sqlite::memory:").unwrap(),
            StoreLocator::Sqlite { path: None }
        );
        assert_eq!(
            StoreLocator::parse("redis://cache:6379/2").unwrap(),
            StoreLocator::Redis {
                url: "redis://cache:6379/2".into(),
                prefix: DEFAULT_REDIS_PREFIX.into()
            }
        );
        assert_eq!(
            StoreLocator::parse("postgresql://u@db/agents?sslmode=disable&idem_schema=billing")
                .unwrap(),
            StoreLocator::Postgres {
                url: "postgresql://u@db/agents?sslmode=disable".into(),
                schema: "billing".into()
            }
        );
    }

    #[test]
    fn rejects_bad_locators_with_what_was_wrong() {
        assert!(matches!(
            StoreLocator::parse("  "),
            Err(StoreConfigError::Empty { .. })
        ));
        let err = StoreLocator::parse("mysql://u:pw@db/x").unwrap_err();
        assert!(matches!(err, StoreConfigError::UnknownScheme { .. }));
        assert!(err.to_string().contains("mysql://u:***@db/x"), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
        assert!(matches!(
            StoreLocator::parse("sqlite:"),
            Err(StoreConfigError::MissingPath { .. })
        ));
        let err = StoreLocator::parse("redis://h/0?idem_schema=x").unwrap_err();
        assert!(
            matches!(&err, StoreConfigError::BadOption { option, .. } if option == "idem_schema")
        );
        assert!(matches!(
            StoreLocator::parse("redis://h/0?idem_prefix=a&idem_prefix=b"),
            Err(StoreConfigError::BadOption { .. })
        ));
    }

    #[test]
    fn display_round_trips_and_hides_passwords() {
        for text in [
            "memory",
            "sqlite:agent.db",
            "sqlite::memory:",
            "redis://cache:6379/0?idem_prefix=billing:",
            "postgres://agent@db:5432/agents?idem_schema=billing",
        ] {
            let locator = StoreLocator::parse(text).unwrap();
            assert_eq!(locator.to_string(), text);
            assert_eq!(StoreLocator::parse(&locator.to_string()).unwrap(), locator);
        }
        let locator = StoreLocator::parse("postgres://agent:hunter2@db/agents").unwrap();
        assert_eq!(locator.to_string(), "postgres://agent:***@db/agents");
        assert!(!format!("{locator:?}").contains("hunter2"));
    }

    #[test]
    fn a_disabled_feature_is_named() {
        for text in ["sqlite:x.db", "redis://h", "postgres://h/db"] {
            let locator = StoreLocator::parse(text).unwrap();
            if locator.is_enabled() {
                continue;
            }
            let err = locator.open().unwrap_err();
            let feature = locator.backend();
            assert!(
                matches!(&err, StoreConfigError::FeatureDisabled { feature: f, .. } if *f == feature)
            );
            assert!(
                err.to_string()
                    .contains(&format!("features = [\"{feature}\"]")),
                "{err}"
            );
        }
    }

    // pins X3: a URL the backend's client library cannot parse, or a bad PostgreSQL schema
    // name, is a malformed locator (bad input), told apart from a store that cannot be opened
    #[test]
    fn malformed_urls_are_bad_input_not_open_failures() {
        let mut cases = Vec::new();
        if cfg!(feature = "postgres") {
            cases.extend([
                "postgres://u:pw@h:notaport/db",
                "postgres://u:pw@h/db?foo=bar",
                "postgres://u:pw@h/db?idem_schema=bad;drop",
                "postgres://u:pw@h/db?idem_schema=bad-schema!",
            ]);
        }
        if cfg!(feature = "redis") {
            cases.extend(["redis://:pw@h:abc/", "redis://:pw@h:1/notadb"]);
        }
        for text in cases {
            let err = StoreLocator::parse(text).unwrap().open().unwrap_err();
            assert!(
                matches!(err, StoreConfigError::Malformed { .. }),
                "{text}: {err:?}"
            );
            assert!(err.to_string().contains(":***@h"), "{err}");
            assert!(!err.to_string().contains("pw"), "{err}");
            let err = err.from_origin("IDEM_STORE");
            assert!(err.to_string().contains("(from IDEM_STORE)"), "{err}");
            assert_eq!(err.into_store_error().kind, StoreErrorKind::Unsupported);
        }
    }

    #[test]
    fn origin_is_named() {
        let err = StoreLocator::parse("mongo://x")
            .unwrap_err()
            .from_origin("IDEM_STORE");
        assert!(err.to_string().contains("(from IDEM_STORE)"), "{err}");
        let store_error: StoreError = err.into();
        assert_eq!(store_error.kind, StoreErrorKind::Unsupported);
    }
}
