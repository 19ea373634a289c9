//! Store steps that must finish even if their caller goes away (contract S7, U4, U5).
//!
//! Once a body has begun, what the protocol writes after it (the saved outcome, a release,
//! the outcome-unknown mark) must reach the store even when the caller's future is dropped
//! while the write is in flight: a `tokio::time::timeout` around the tool call, an aborted
//! task. One mechanism serves every store: the write is an owned `'static` future, polled in
//! place by [`Detachable`]; if the caller drops it before it finished, the unfinished write
//! moves to a task of its own ([`detach`]) and completes there.
//!
//! Where a detached write runs: on the tokio runtime of the dropping thread, if any; else on
//! idem's own background runtime (one thread, started on first use), which also drives the
//! heartbeats of sync bodies ([`crate::heartbeat`]). A store that needs its own runtime's
//! I/O ([`Store::needs_runtime_io`](crate::Store::needs_runtime_io)) is only used from
//! inside a runtime, so its writes always find one.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use futures_util::FutureExt;
use tokio::runtime::Handle;

/// An owned, `Send` store step.
pub(crate) type Step<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A store step that is polled in place and, if dropped unfinished, finishes on a task.
pub(crate) struct Detachable<T: Send + 'static> {
    step: Option<Step<T>>,
}

impl<T: Send + 'static> Detachable<T> {
    pub(crate) fn new(step: impl Future<Output = T> + Send + 'static) -> Self {
        Detachable {
            step: Some(Box::pin(step)),
        }
    }
}

impl<T: Send + 'static> Future for Detachable<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(step) = self.step.as_mut() else {
            // Polled after completion: a caller bug; never answer twice.
            return Poll::Pending;
        };
        let output = std::task::ready!(step.as_mut().poll(cx));
        self.step = None;
        Poll::Ready(output)
    }
}

impl<T: Send + 'static> Drop for Detachable<T> {
    fn drop(&mut self) {
        if let Some(step) = self.step.take() {
            detach(step.map(drop));
        }
    }
}

/// Runs `step` to completion without a caller: first one poll in place (in-process stores
/// finish there, even during a panic's unwinding), then, if it is not done, on the current
/// tokio runtime or idem's background runtime.
pub(crate) fn detach(step: impl Future<Output = ()> + Send + 'static) {
    let mut step: Step<()> = Box::pin(step);
    if (&mut step).now_or_never().is_some() {
        return;
    }
    // If that runtime is shutting down the task never runs; the claim then lapses with its
    // lease, and the next caller treats the outcome as unknown (U1).
    match Handle::try_current().ok().or_else(|| background().cloned()) {
        Some(runtime) => drop(runtime.spawn(step)),
        // No runtime could be started: finish here, blocking this thread.
        None => pollster::block_on(step),
    }
}

/// idem's background runtime: one thread with a current-thread tokio runtime, started on
/// first use, for detached store steps and sync bodies' heartbeats outside any runtime.
/// `None` if the thread or the runtime could not be started (logged once).
pub(crate) fn background() -> Option<&'static Handle> {
    static BACKGROUND: OnceLock<Option<Handle>> = OnceLock::new();
    BACKGROUND
        .get_or_init(|| {
            // Timers and I/O on: a store's futures may need them (deadpool's timeouts).
            let started = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|runtime| {
                    let handle = runtime.handle().clone();
                    std::thread::Builder::new()
                        .name("idem-background".into())
                        .spawn(move || runtime.block_on(std::future::pending::<()>()))
                        .map(|_| handle)
                });
            started
                .map_err(|error| {
                    tracing::error!(%error, "idem could not start its background runtime; detached store steps run on the dropping thread and sync bodies are not renewed");
                })
                .ok()
        })
        .as_ref()
}
