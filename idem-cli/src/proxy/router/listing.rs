//! The server's tools as the proxy lists them itself, and the check of the configuration
//! against them (contract Y2, Y4).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Reply, Router, OWN_REQUEST_TIMEOUT};
use crate::proxy::tools::ToolTable;

impl Router {
    /// The server's tools, listed (and checked against the configuration) if they are not
    /// yet: waits for the listing; `None` once the proxy stops.
    pub async fn tool_table(self: &Arc<Self>) -> Option<Arc<ToolTable>> {
        let mut tools = self.tools.subscribe();
        if tools.borrow().is_none() {
            self.probe_tools();
        }
        let mut stopping = self.stopping();
        tokio::select! {
            table = tools.wait_for(Option::is_some) => table.ok().and_then(|t| t.clone()),
            _ = stopping.wait_for(Option::is_some) => None,
        }
    }

    /// Starts listing the server's tools; a listing asked for while one is under way runs
    /// again after it (the tools may have changed since it began), and the earlier one's
    /// answer is not used.
    pub fn probe_tools(self: &Arc<Self>) {
        {
            let mut state = self.state();
            if state.probing {
                state.probe_again = true;
                return;
            }
            state.probing = true;
        }
        let router = Arc::clone(self);
        tokio::spawn(async move {
            let listed = loop {
                let listed = router.list_tools().await;
                let mut state = router.state();
                if !std::mem::take(&mut state.probe_again) {
                    break listed;
                }
            };
            let Some(table) = listed else {
                // The server went away meanwhile: its restart lists the tools again.
                router.state().probing = false;
                return;
            };
            let checked = table.check(&router.config);
            router.state().probing = false;
            match checked {
                Ok(()) => {
                    router.tools.send_replace(Some(Arc::new(table)));
                }
                Err(problem) => router.stop(
                    format!("the configuration does not fit the server: {problem}"),
                    2,
                ),
            }
        });
    }

    /// Every page of the server's `tools/list`, as the proxy's own requests (Y2, Y5). A
    /// server that answers with an error, or not within [`OWN_REQUEST_TIMEOUT`], lists no
    /// tools; `None` when the request or its answer was lost with the server's process.
    async fn list_tools(&self) -> Option<ToolTable> {
        let mut table = ToolTable::default();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = Map::new();
            if let Some(cursor) = &cursor {
                params.insert("cursor".into(), Value::from(cursor.clone()));
            }
            let protocol = self.state().protocol_meta.clone();
            if !protocol.is_empty() {
                params.insert("_meta".into(), Value::Object(protocol));
            }
            let params = (!params.is_empty()).then_some(Value::Object(params));
            let reply = self.request("tools/list", params);
            let page = match tokio::time::timeout(OWN_REQUEST_TIMEOUT, reply).await {
                Ok(Ok(Reply::Answer(body))) => match body.get("result") {
                    Some(Value::Object(result)) => result.clone(),
                    _ => {
                        let answer = Value::Object(body).to_string();
                        tracing::warn!(%answer, "the server's tools/list failed: no tool is known read-only");
                        return Some(table);
                    }
                },
                Ok(Ok(Reply::Lost(why) | Reply::NotDelivered(why))) => {
                    tracing::warn!("the server's tools/list got no answer: {why}");
                    return None;
                }
                Ok(Err(_)) => return None,
                Err(_) => {
                    tracing::warn!(
                        "the server did not answer tools/list within {OWN_REQUEST_TIMEOUT:?}"
                    );
                    return Some(table);
                }
            };
            match table.add_page(&page) {
                Some(next) => cursor = Some(next),
                None => return Some(table),
            }
        }
    }

    /// After a restart: lists the tools again unless they are listed (a listing lost with
    /// the old process would otherwise leave calls waiting for it, Y6).
    pub fn probe_if_unlisted(self: &Arc<Self>) {
        if self.tools.borrow().is_none() {
            self.probe_tools();
        }
    }

    /// Whether the proxy is listing the server's tools.
    pub fn probing(&self) -> bool {
        self.state().probing
    }

    /// How many keyed calls are in progress (the proxy waits for them before it exits).
    pub fn keyed_in_progress(&self) -> usize {
        self.state().keyed.len()
    }

    /// How many of the client's requests wait for an answer: keyed calls, and requests
    /// forwarded to the server (the proxy waits for them when the client closes its input).
    pub fn client_requests_in_flight(&self) -> usize {
        let state = self.state();
        state.keyed.len()
            + state
                .to_server
                .values()
                .filter(|p| matches!(p.waiter, super::Waiter::Client { .. }))
                .count()
    }
}
