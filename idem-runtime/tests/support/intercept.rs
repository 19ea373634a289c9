//! A store in front of another, for tests that must see or change what one operation does
//! (count takeovers, fail renewals, delay an acknowledgement, die after a write) and leave
//! every other operation to the real store.
//!
//! A test writes the operations it changes as an [`Intercept`], whose every method defaults
//! to forwarding, and puts it in front of a store with [`Intercepted`]; the wrapper is the
//! [`Store`] and dereferences to the interceptor, so its counters and switches stay in reach.
//! An operation added to [`Store`] is forwarded here once, for every such test.

#![allow(dead_code)] // each test binary uses its own subset

use std::ops::Deref;
use std::sync::Arc;

use idem_runtime::key::IdempotencyKey;
use idem_runtime::store::{
    ChangeSignal, Claim, ClaimRequest, CompleteRequest, Completion, History, ListPage, ListQuery,
    MarkUnknownRequest, OwnerToken, PurgeCounts, PurgeOutcome, Record, RenewRequest, StoreFuture,
    StoreStats, TakeoverRequest, TransitionRequest,
};
use idem_runtime::{Store, Timestamp};

/// What a test changes of a store's operations; each method receives the real store and by
/// default forwards to it.
pub trait Intercept: std::fmt::Debug + Send + Sync + 'static {
    fn claim<'a>(&'a self, inner: &'a dyn Store, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        inner.claim(req)
    }
    fn take_over<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: TakeoverRequest<'a>,
    ) -> StoreFuture<'a, bool> {
        inner.take_over(req)
    }
    fn renew<'a>(&'a self, inner: &'a dyn Store, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        inner.renew(req)
    }
    fn mark_unknown<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: MarkUnknownRequest<'a>,
    ) -> StoreFuture<'a, bool> {
        inner.mark_unknown(req)
    }
    fn complete<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: CompleteRequest<'a>,
    ) -> StoreFuture<'a, Completion> {
        inner.complete(req)
    }
    fn transition<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: TransitionRequest<'a>,
    ) -> StoreFuture<'a, bool> {
        inner.transition(req)
    }
    fn release<'a>(
        &'a self,
        inner: &'a dyn Store,
        key: &'a IdempotencyKey,
        owner: OwnerToken,
    ) -> StoreFuture<'a, bool> {
        inner.release(key, owner)
    }
    /// The backend name the wrapper reports; `None` (the default) reports the real store's.
    fn backend(&self) -> Option<&'static str> {
        None
    }
}

/// `interceptor` in front of `inner`: the [`Store`] a test hands to the engine.
#[derive(Debug)]
pub struct Intercepted<I> {
    pub inner: Arc<dyn Store>,
    pub interceptor: I,
}

impl<I: Intercept> Intercepted<I> {
    pub fn new(inner: Arc<dyn Store>, interceptor: I) -> Self {
        Intercepted { inner, interceptor }
    }
}

impl<I> Deref for Intercepted<I> {
    type Target = I;
    fn deref(&self) -> &I {
        &self.interceptor
    }
}

impl<I: Intercept> Store for Intercepted<I> {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        self.interceptor.claim(&*self.inner, req)
    }
    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        self.interceptor.take_over(&*self.inner, req)
    }
    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        self.interceptor.renew(&*self.inner, req)
    }
    fn mark_unknown<'a>(&'a self, req: MarkUnknownRequest<'a>) -> StoreFuture<'a, bool> {
        self.interceptor.mark_unknown(&*self.inner, req)
    }
    fn complete<'a>(&'a self, req: CompleteRequest<'a>) -> StoreFuture<'a, Completion> {
        self.interceptor.complete(&*self.inner, req)
    }
    fn transition<'a>(&'a self, req: TransitionRequest<'a>) -> StoreFuture<'a, bool> {
        self.interceptor.transition(&*self.inner, req)
    }
    fn history<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<History>> {
        self.inner.history(key, now)
    }
    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        self.interceptor.release(&*self.inner, key, owner)
    }
    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>> {
        self.inner.read(key, now)
    }
    fn list<'a>(&'a self, query: &'a ListQuery, now: Timestamp) -> StoreFuture<'a, ListPage> {
        self.inner.list(query, now)
    }
    fn purge<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeOutcome> {
        self.inner.purge(key, force, now)
    }
    fn purge_matching<'a>(
        &'a self,
        query: &'a ListQuery,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeCounts> {
        self.inner.purge_matching(query, force, now)
    }
    fn stats<'a>(&'a self, now: Timestamp) -> StoreFuture<'a, StoreStats> {
        self.inner.stats(now)
    }
    fn watch(&self, key: &IdempotencyKey) -> Option<ChangeSignal> {
        self.inner.watch(key)
    }
    fn needs_runtime_io(&self) -> bool {
        self.inner.needs_runtime_io()
    }
    fn backend(&self) -> &'static str {
        self.interceptor
            .backend()
            .unwrap_or_else(|| self.inner.backend())
    }
    fn round_trips(&self) -> Option<u64> {
        self.inner.round_trips()
    }
}
