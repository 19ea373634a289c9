//! Store operations that run as tokio tasks, and the release of a claim whose caller went
//! away before the operation that acquired it answered (S7). Shared by the SQLite
//! (blocking pool), PostgreSQL and Redis stores.

use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::{OwnerToken, Store, StoreError, StoreErrorKind, StoreFuture};
use crate::key::IdempotencyKey;

/// The key and owner of a claim being acquired, to release if nobody awaits the result and
/// `acquired` says the operation acquired it.
pub(crate) struct Undo<T> {
    pub(crate) key: IdempotencyKey,
    pub(crate) owner: OwnerToken,
    pub(crate) acquired: fn(&T) -> bool,
}

/// The result of `task` for the caller. If the caller drops the returned future before the
/// task answered, and the task then reports (by `undo.acquired`) that it acquired a claim,
/// the claim is released on `runtime` at once instead of staying in progress until its
/// lease lapses. `what` names the operation in errors ("a SQLite call").
pub(crate) fn awaited<T: Send + 'static>(
    task: JoinHandle<Result<T, StoreError>>,
    runtime: Handle,
    store: Arc<dyn Store>,
    undo: Option<Undo<T>>,
    backend: &'static str,
    what: &'static str,
) -> StoreFuture<'static, T> {
    let mut in_flight = InFlight {
        task: Some(task),
        runtime,
        store,
        undo,
    };
    Box::pin(async move {
        // Always present here: only this block and `Drop` take it.
        let Some(task) = in_flight.task.as_mut() else {
            return Err(StoreError::new(
                backend,
                StoreErrorKind::Unavailable,
                format!("{what} lost its task"),
            ));
        };
        let joined = task.await;
        in_flight.answered();
        joined.unwrap_or_else(|e| {
            Err(StoreError::new(
                backend,
                StoreErrorKind::Unavailable,
                format!("the task of {what} did not finish: {e}"),
            ))
        })
    })
}

/// An operation running as a task, and what to undo if its caller goes away.
struct InFlight<T: Send + 'static> {
    task: Option<JoinHandle<Result<T, StoreError>>>,
    runtime: Handle,
    store: Arc<dyn Store>,
    undo: Option<Undo<T>>,
}

impl<T: Send + 'static> InFlight<T> {
    /// The caller got the answer: nothing to undo.
    fn answered(&mut self) {
        self.task = None;
    }
}

impl<T: Send + 'static> Drop for InFlight<T> {
    fn drop(&mut self) {
        let (Some(task), Some(undo)) = (self.task.take(), self.undo.take()) else {
            return;
        };
        let store = Arc::clone(&self.store);
        // If the runtime is shutting down the task never runs: the lease lapses instead.
        drop(self.runtime.spawn(async move {
            if let Ok(Ok(result)) = task.await {
                if (undo.acquired)(&result) {
                    if let Err(error) = store.release(&undo.key, undo.owner).await {
                        tracing::warn!(key = %undo.key, %error, "could not release an abandoned claim; it lapses with its lease");
                    }
                }
            }
        }));
    }
}
