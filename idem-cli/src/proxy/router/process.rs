//! The server's process as the switchboard sees it: which requests went to which process,
//! and what becomes of them when it exits (contract Y6).

use serde_json::Value;

use super::{Pending, Reply, Router, Waiter};
use crate::proxy::jsonrpc::{error_line, INTERNAL_ERROR};

impl Router {
    /// A new server process, `generation`, replaces the last.
    pub fn server_started(&self, generation: u64) {
        let mut state = self.state();
        state.generation = generation;
        state.initialize_answered = false;
    }

    /// The request with `proxy_id` is about to be written to the server of `generation`:
    /// `false` when nobody waits for it any more (the proxy winds down, or answered it as
    /// not delivered): then it must not be written.
    pub fn written(&self, proxy_id: u64, generation: u64) -> bool {
        match self.state().to_server.get_mut(&proxy_id) {
            Some(pending) => {
                pending.written = Some(generation);
                true
            }
            None => false,
        }
    }

    /// The request with `proxy_id` could not be written: its waiter gets an error.
    pub fn not_delivered(&self, proxy_id: u64, why: &str) {
        let pending = self.state().to_server.remove(&proxy_id);
        match pending.map(|p| p.waiter) {
            Some(Waiter::Client { id, .. }) => {
                self.state().client_ids.remove(&id.text());
                self.send_client(error_line(
                    &id,
                    INTERNAL_ERROR,
                    format!("the MCP server did not get the request: {why}"),
                ));
            }
            Some(Waiter::Task(sender)) => {
                let _ = sender.send(Reply::NotDelivered(why.to_owned()));
            }
            None => {}
        }
    }

    /// The server process of `generation` exited (`why`): every request written to it gets
    /// an error, keyed calls an unknown outcome (Y6); its requests to the client are
    /// forgotten.
    pub fn server_exited(&self, generation: u64, why: &str) {
        let lost: Vec<Pending> = {
            let mut state = self.state();
            let ids: Vec<u64> = state
                .to_server
                .iter()
                .filter(|(_, p)| p.written == Some(generation))
                .map(|(id, _)| *id)
                .collect();
            let lost = ids
                .iter()
                .filter_map(|id| state.to_server.remove(id))
                .collect();
            state.to_client.retain(|_, (g, _)| *g != generation);
            state.server_ids.retain(|(g, _), _| *g != generation);
            lost
        };
        for pending in lost {
            match pending.waiter {
                Waiter::Client { id, method } => {
                    self.state().client_ids.remove(&id.text());
                    self.send_client(error_line(
                        &id,
                        INTERNAL_ERROR,
                        format!("{why} before answering `{method}`; idem restarts it: retry"),
                    ));
                }
                Waiter::Task(sender) => {
                    let _ = sender.send(Reply::Lost(why.to_owned()));
                }
            }
        }
    }

    /// The client's `initialize` params, when the client initialised through it.
    pub fn initialize_params(&self) -> Option<Value> {
        self.state().initialize.clone()
    }

    /// Whether the client's `initialize` got a result from the current server process.
    pub fn initialize_answered(&self) -> bool {
        self.state().initialize_answered
    }

    /// Whether the client completed its initialisation (`notifications/initialized`).
    pub fn client_initialized(&self) -> bool {
        self.state().initialized
    }
}
