//! The PostgreSQL store's operations as tokio tasks, each bounded in time.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{select, Either};

use super::{Inner, PostgresStore, BACKEND, OPERATION_TIMEOUT};
use crate::store::in_flight::{self, Undo};
use crate::store::{StoreError, StoreErrorKind, StoreFuture};

impl PostgresStore {
    /// Runs `op` as a task on the caller's tokio runtime, failing it with
    /// [`StoreErrorKind::Unavailable`] after [`OPERATION_TIMEOUT`]; fails with
    /// [`StoreErrorKind::Unsupported`] outside a runtime.
    ///
    /// `undo` is for operations that may acquire a claim (claim, take over): if the caller
    /// drops the future before `op` finished, and `op` then reports (by `undo.acquired`)
    /// that it acquired the claim, the claim is released at once (S7).
    pub(super) fn run<T, F, Fut>(&self, op: F, undo: Option<Undo<T>>) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.spawn(op, undo, Some(OPERATION_TIMEOUT))
    }

    /// As [`run`](Self::run), with the time bound `limit` (none: unbounded).
    pub(super) fn spawn<T, F, Fut>(
        &self,
        op: F,
        undo: Option<Undo<T>>,
        limit: Option<Duration>,
    ) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Box::pin(std::future::ready(Err(StoreError::new(
                BACKEND,
                StoreErrorKind::Unsupported,
                format!(
                    "the PostgreSQL store at {} needs a tokio runtime: call it from async code \
                     inside one (sync tools without a runtime need the memory or SQLite store)",
                    self.inner.url
                ),
            ))));
        };
        let op = op(Arc::clone(&self.inner));
        let task = match limit {
            None => runtime.spawn(op),
            Some(limit) => runtime.spawn(bounded(Arc::clone(&self.inner), op, limit)),
        };
        in_flight::awaited(
            task,
            runtime,
            Arc::new(self.clone()),
            undo,
            BACKEND,
            "a PostgreSQL call",
        )
    }
}

/// `op`, or an [`StoreErrorKind::Unavailable`] error once `limit` has passed without an
/// answer: a server that hangs, or a network that drops packets, never hangs the caller.
///
/// The timer is [`futures_timer`]'s, so that a runtime built without tokio's time driver
/// does not panic here. On timeout, `op` is dropped (its connection goes back to the pool,
/// its statement may still reach the server: a claim may then be acquired by nobody and
/// lapse with its lease, S6, S10), and every idle pooled connection is closed, so that the
/// next operation connects afresh instead of queueing behind a connection that does not
/// answer.
async fn bounded<T>(
    inner: Arc<Inner>,
    op: impl std::future::Future<Output = Result<T, StoreError>>,
    limit: Duration,
) -> Result<T, StoreError> {
    match select(Box::pin(op), futures_timer::Delay::new(limit)).await {
        Either::Left((result, _)) => result,
        Either::Right(((), op)) => {
            // Dropping `op` first returns its connection to the pool, to be closed below.
            drop(op);
            let closed = inner.pool.retain(|_, _| false).removed.len();
            tracing::warn!(url = %inner.url, closed, "no answer from the PostgreSQL server; closed the idle pooled connections");
            Err(StoreError::new(
                BACKEND,
                StoreErrorKind::Unavailable,
                format!(
                    "no answer from {} (schema {}) within {} ms",
                    inner.url,
                    inner.schema,
                    limit.as_millis()
                ),
            ))
        }
    }
}
