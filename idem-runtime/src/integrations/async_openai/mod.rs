//! Typed dispatch of [async-openai](https://docs.rs/async-openai/0.43) responses (feature
//! `async-openai`; contract O1–O5).
//!
//! Hand the dispatcher async-openai's own response types and get back the request types
//! the next call takes, with no JSON in between:
//!
//! | API | in | out |
//! | --- | --- | --- |
//! | Chat Completions | [`Dispatcher::dispatch_chat_completion`]`(&CreateChatCompletionResponse, …)`, [`Dispatcher::dispatch_chat_message`]`(&ChatCompletionResponseMessage, …)` | [`ChatToolResults`]: the assistant message and one tool message per call of the model's message (one per parallel wrapper, D7; `ChatCompletionRequestMessage`) |
//! | Responses | [`Dispatcher::dispatch_response`]`(&Response, …)`, [`Dispatcher::dispatch_response_output`]`(&[OutputItem], …)` | [`ResponseToolResults`]: one `function_call_output` item per call of the response (one per parallel wrapper, D7; `InputItem`) |
//!
//! The calls run as [`Dispatcher::dispatch_turn`] runs any provider's calls: concurrently,
//! each retry carrying its call's key, under a [`Conversation`] (D2–D4). Each result also
//! has its [`CallReport`](crate::dispatch::CallReport): attempts, key, executed or replayed.
//! A retried turn (the same response dispatched again) replays every call's saved outcome.
//! An OpenAI parallel wrapper (`multi_tool_use.parallel`) is run as the calls it holds and
//! answered by one tool message or `function_call_output` under its id (D7).
//!
//! Only the types are needed (`default-features = false, features =
//! ["chat-completion-types", "response-types"]`); the HTTP client is the application's.
//!
//! ```
//! # extern crate idem_runtime as idem_agent;
//! # use async_openai::types::chat::{ChatChoice, ChatCompletionMessageToolCall, ChatCompletionResponseMessage, CreateChatCompletionResponse, FunctionCall};
//! # mod send_refund { // what `#[idempotent] async fn send_refund(order_id: &str, amount_cents: u64)` generates
//! #     use idem_runtime as idem_agent;
//! #     #[derive(serde::Deserialize)] pub struct Args { order_id: String, amount_cents: u64 }
//! #     static SPEC: idem_agent::ToolSpec = idem_agent::ToolSpec::new("send_refund");
//! #     pub fn tool() -> idem_agent::dispatch::Tool {
//! #         idem_agent::dispatch::Tool::from_async("send_refund", |a: Args, _ctx| async move {
//! #             idem_agent::prepare(&SPEC, None, |b| { b.key("order_id", &a.order_id)?.key("amount_cents", &a.amount_cents)?; Ok(()) })?
//! #                 .run(async move { Ok::<_, idem_agent::ToolError>(format!("refunded {} on {}", a.amount_cents, a.order_id)) }).await
//! #         })
//! #     }
//! # }
//! # fn chat_response() -> CreateChatCompletionResponse { // the model asks for two refunds
//! #     let call = |id: &str, arguments: &str| ChatCompletionMessageToolCall { id: id.into(),
//! #         function: FunctionCall { name: "send_refund".into(), arguments: arguments.into() } }.into();
//! #     let message = ChatCompletionResponseMessage { tool_calls: Some(vec![
//! #         call("call_1", r#"{"order_id":"ord_7","amount_cents":500}"#),
//! #         call("call_2", r#"{"order_id":"ord_8","amount_cents":250}"#)]), ..Default::default() };
//! #     CreateChatCompletionResponse { id: "chatcmpl_1".into(), choices: vec![ChatChoice { message, ..Default::default() }], ..Default::default() }
//! # }
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! use async_openai::types::chat::{ChatCompletionRequestMessage, ChatCompletionRequestUserMessage, CreateChatCompletionRequestArgs};
//! use idem_agent::{dispatch::{Conversation, Dispatcher}, CallStatus};
//!
//! let dispatcher = Dispatcher::builder().tool(send_refund::tool()).build()?;
//! let conversation = Conversation::new("conv_42");
//! let mut messages = vec![ChatCompletionRequestMessage::from(ChatCompletionRequestUserMessage::from("Refund orders 7 and 8"))];
//! let response = chat_response(); // what `client.chat().create(request).await?` returned
//! let results = dispatcher.dispatch_chat_completion(&response, &conversation).await?;
//! assert_eq!(results.reports()[1].status(), Some(CallStatus::Executed));
//! results.append_to(&mut messages); // the assistant message, then one tool message per call
//! let next = CreateChatCompletionRequestArgs::default().model("gpt-4.1").messages(messages).build()?;
//! assert_eq!(next.messages.len(), 4);
//! // A retried turn (the same response again) replays: no second refund.
//! let again = dispatcher.dispatch_chat_completion(&response, &conversation).await?;
//! assert_eq!(again.reports()[1].status(), Some(CallStatus::Replayed));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`Dispatcher::dispatch_turn`]: crate::dispatch::Dispatcher::dispatch_turn
//! [`Dispatcher::dispatch_chat_completion`]: crate::dispatch::Dispatcher::dispatch_chat_completion
//! [`Dispatcher::dispatch_chat_message`]: crate::dispatch::Dispatcher::dispatch_chat_message
//! [`Dispatcher::dispatch_response`]: crate::dispatch::Dispatcher::dispatch_response
//! [`Dispatcher::dispatch_response_output`]: crate::dispatch::Dispatcher::dispatch_response_output
//! [`Conversation`]: crate::dispatch::Conversation

mod chat;
mod error;
mod responses;

pub use chat::{assistant_message, ChatToolResults};
pub use error::OpenAiDispatchError;
pub use responses::ResponseToolResults;
