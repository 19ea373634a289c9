//! A keyed `tools/call` over streamable HTTP: the upstream's answer as the outcome, its
//! events relayed while it answers (contract Y3, Y7, Y10).

use super::super::jsonrpc::answer_line;
use super::sse::{sse_response, Answer};
use super::*;

impl HttpProxy {
    /// A client's `tools/call` (Y3, Y7, Y10).
    pub(super) async fn tools_call(
        self: Arc<Self>,
        parts: http::request::Parts,
        bytes: Bytes,
        id: Id,
        params: Map<String, Value>,
        tool: String,
    ) -> Response<Body> {
        let table = match self.tool_table(&parts.headers).await {
            Ok(table) => table,
            Err(problem) => {
                return json_text_response(StatusCode::OK, error_line(&id, INTERNAL_ERROR, problem))
            }
        };
        let Some(plan) = table.plan(&self.config, &tool) else {
            return self.forward(parts, full(bytes)).await;
        };
        let session = session(&parts.headers);
        let mut call = ForwardedCall::from_params(
            &params,
            Some(self.engine.clone()),
            &self.config.conversation_meta,
        );
        if self.config.session_as_conversation && !session.is_empty() {
            call = call.with_session(session.clone());
        }
        let (cancelled, mut cancelled_seen) = watch::channel(false);
        let exchange = Arc::new(Exchange::default());
        let entry = (session, id.text());
        self.keyed().insert(entry.clone(), Keyed { cancelled });
        // Events for the client while the upstream answers as a stream; the response turns
        // into that stream when the first one comes.
        let (events, events_seen) = mpsc::unbounded_channel::<Bytes>();
        let (streaming, streaming_seen) = oneshot::channel::<()>();
        let (done, done_seen) = oneshot::channel::<Finished>();
        let proxy = Arc::clone(&self);
        let task_exchange = Arc::clone(&exchange);
        let mut stopping = self.stopping.subscribe();
        if *stopping.borrow() {
            self.keyed().remove(&entry);
            return json_text_response(StatusCode::OK, error_line(&id, INTERNAL_ERROR, STOPPING));
        }
        self.running.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let mut streaming = Some(streaming);
            let mut relay = |event: Bytes| {
                if let Some(start) = streaming.take() {
                    let _ = start.send(());
                }
                let _ = events.send(event);
            };
            let mut upstream_stopping = stopping.clone();
            let on_cancel = plan.spec.on_cancel;
            let cancelled_now = cancelled_seen.clone();
            let forward = async {
                tokio::select! {
                    answer = proxy.forward_keyed(&parts, bytes, &id, &task_exchange, &mut relay) => {
                        if *cancelled_now.borrow() {
                            answer.after_cancellation(on_cancel)
                        } else {
                            answer
                        }
                    }
                    // Forwarded and unanswered when the proxy stops: the effect may have
                    // happened (U1).
                    _ = upstream_stopping.wait_for(|stop| *stop) => ServerAnswer::Lost {
                        reason: "the proxy stopped before the upstream answered".to_owned(),
                    },
                }
            };
            let run = call.run(plan.spec, plan.key, forward);
            let was_forwarded = Arc::clone(&task_exchange);
            let forwarded_now = Arc::clone(&task_exchange);
            let outcome = tokio::select! {
                outcome = run => Some(Ok(outcome)),
                () = given_up(&mut cancelled_seen, move || was_forwarded.forwarded.load(Ordering::SeqCst), proxy.config.cancel_wait) => None,
                // Still waiting for its claim: nothing went upstream.
                () = async {
                    let _ = stopping.wait_for(|stop| *stop).await;
                    if forwarded_now.forwarded.load(Ordering::SeqCst) {
                        std::future::pending::<()>().await;
                    }
                } => Some(Err(())),
            };
            proxy.keyed().remove(&entry);
            let finished = match outcome {
                Some(Ok(Ok(result))) => Finished::Message(answer_line(&id, Ok(&result))),
                Some(Ok(Err(error))) => Finished::Message(answer_line(&id, Err(&error))),
                Some(Err(())) => Finished::Message(error_line(&id, INTERNAL_ERROR, STOPPING)),
                None => Finished::Nothing,
            };
            proxy.running.fetch_sub(1, Ordering::SeqCst);
            if streaming.is_none() {
                if let Finished::Message(message) = &finished {
                    let _ = events.send(encode_sse(
                        &Sse::default().event("message").data(message.clone()),
                    ));
                }
            }
            let _ = done.send(finished);
        });
        tokio::select! {
            Ok(()) = streaming_seen => {
                let headers = std::mem::take(&mut *exchange.headers.lock().unwrap_or_else(PoisonError::into_inner));
                sse_response(events_seen, headers)
            }
            finished = done_seen => {
                if let Some(response) = exchange.passthrough.lock().unwrap_or_else(PoisonError::into_inner).take() {
                    return response;
                }
                match finished {
                    Ok(Finished::Message(message)) => json_text_response(StatusCode::OK, message),
                    _ => Response::builder().status(StatusCode::ACCEPTED).body(full(Bytes::new())).unwrap_or_default(),
                }
            }
        }
    }

    /// The body of a keyed call over HTTP: the request upstream, its events relayed, its
    /// answer (Y10). A non-2xx upstream answer is not the tool's: it is handed to the client
    /// unchanged (in `passthrough`) and the claim released.
    async fn forward_keyed(
        &self,
        parts: &http::request::Parts,
        bytes: Bytes,
        id: &Id,
        exchange: &Exchange,
        relay: &mut (dyn FnMut(Bytes) + Send),
    ) -> ServerAnswer {
        exchange.forwarded.store(true, Ordering::SeqCst);
        let response = match self
            .send_upstream(&parts.method, &parts.uri, &parts.headers, full(bytes))
            .await
        {
            Ok(response) => response,
            // Written and unanswered: the effect may have happened (U1).
            Err(error) if error.maybe_delivered => {
                return ServerAnswer::Lost {
                    reason: error.message,
                }
            }
            Err(error) => {
                return ServerAnswer::NotDelivered(
                    error_response(Value::Null, INTERNAL_ERROR, error.message)["error"].take(),
                )
            }
        };
        if !response.status().is_success() {
            let (mut head, body) = response.into_parts();
            strip_hop_by_hop(&mut head.headers);
            let status = head.status;
            *exchange
                .passthrough
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                Some(Response::from_parts(head, body.boxed_unsync_err()));
            return ServerAnswer::NotDelivered(
                error_response(
                    Value::Null,
                    INTERNAL_ERROR,
                    format!("the upstream answered HTTP {status}"),
                )["error"]
                    .take(),
            );
        }
        {
            let mut headers = response.headers().clone();
            strip_hop_by_hop(&mut headers);
            headers.remove(header::CONTENT_LENGTH);
            *exchange
                .headers
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = headers;
        }
        let tools = Arc::clone(&self.tools);
        let mut relay_event = |event: Sse| {
            if event
                .data
                .as_deref()
                .is_some_and(|d| d.contains("notifications/tools/list_changed"))
            {
                *tools.lock().unwrap_or_else(PoisonError::into_inner) = None;
            }
            relay(encode_sse(&event));
        };
        match read_answer(response, id, &mut relay_event).await {
            Ok(Answer::Message(message)) => ServerAnswer::from_response(message),
            Ok(Answer::None) => ServerAnswer::Lost {
                reason: "the upstream MCP server closed its answer".to_owned(),
            },
            Err(why) => ServerAnswer::Lost { reason: why },
        }
    }
}

/// The error a keyed call gets when the proxy stops before forwarding it.
const STOPPING: &str =
    "the proxy is stopping; the call was not forwarded to the upstream MCP server: retry";

/// What a keyed call's upstream exchange leaves for the response to the client.
#[derive(Default)]
struct Exchange {
    /// The request went upstream (a cancellation then waits for `cancel_wait`, Y7).
    forwarded: AtomicBool,
    /// A non-2xx upstream answer, handed back unchanged.
    passthrough: Mutex<Option<Response<Body>>>,
    /// The upstream answer's headers, for a relayed event stream.
    headers: Mutex<HeaderMap>,
}

enum Finished {
    /// The JSON-RPC answer, as text.
    Message(String),
    Nothing,
}
