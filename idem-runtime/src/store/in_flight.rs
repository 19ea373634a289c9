//! Store operations that run as tokio tasks, and the release of a claim whose caller went
//! away before the operation that acquired it answered (S7). Shared by the SQLite
//! (blocking pool), PostgreSQL and Redis stores.

use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::{
    Claim, HistoryEntry, HistoryEvent, OwnerToken, Seen, Store, StoreError, StoreErrorKind,
    StoreFuture, Target, TransitionRequest,
};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;

/// The key, owner and time of a claim being acquired, to give back if nobody awaits the
/// result and `acquired` says the operation acquired it.
pub(crate) struct Undo<T> {
    pub(crate) key: IdempotencyKey,
    pub(crate) owner: OwnerToken,
    /// The claim's `now`: the time of the `released` entry of a reopened claim given back.
    pub(crate) now: Timestamp,
    pub(crate) acquired: fn(&T) -> Option<Acquired>,
}

/// A claim an operation acquired: its fence, and whether it reopened a key decided not
/// applied (U6).
pub(crate) struct Acquired {
    fence: u64,
    reopened: bool,
}

/// [`Undo::acquired`] for [`Store::claim`].
pub(crate) fn claimed(claim: &Claim) -> Option<Acquired> {
    match claim {
        Claim::Acquired { fence, reopened } => Some(Acquired {
            fence: *fence,
            reopened: *reopened,
        }),
        _ => None,
    }
}

/// The result of `task` for the caller. If the caller drops the returned future before the
/// task answered, and the task then reports (by `undo.acquired`) that it acquired a claim,
/// the claim is given back on `runtime` at once instead of staying in progress until its
/// lease lapses: released (deleted), or, for a claim that reopened a key decided not
/// applied, returned to not applied with its fence and history (U4, U6). `what` names the operation in errors ("a SQLite call").
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
            let Ok(Ok(result)) = task.await else {
                return;
            };
            let Some(acquired) = (undo.acquired)(&result) else {
                return;
            };
            let given_back = if acquired.reopened {
                let entry = HistoryEntry::new(undo.now, HistoryEvent::Released, acquired.fence);
                let request = TransitionRequest {
                    key: &undo.key,
                    fence: acquired.fence,
                    seen: Seen::InProgress {
                        owner: undo.owner,
                        lease_until: None,
                    },
                    target: Target::NotApplied,
                    now: undo.now,
                    expires_at: undo.now,
                    entry,
                };
                store.transition(request).await
            } else {
                store.release(&undo.key, undo.owner).await
            };
            if let Err(error) = given_back {
                tracing::warn!(key = %undo.key, %error, "could not give back an abandoned claim; it lapses with its lease");
            }
        }));
    }
}
