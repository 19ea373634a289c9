//! What can be wrong with an async-openai response handed to the dispatcher (O5).

/// Why an async-openai response could not be dispatched, or its results not be written
/// in async-openai's types (contract O5).
///
/// Every variant but [`ResultConversion`](Self::ResultConversion) is returned before any
/// call runs, for the same documents the JSON parser refuses
/// ([`ParseError`](crate::dispatch::ParseError), D1). Problems with one call's
/// *arguments* (not JSON, not an object, a member named twice, a parallel wrapper's
/// arguments that are not a list of tool uses, D7) are not errors here: that
/// call gets a `bad_arguments` result message and does not run, and the other calls of
/// the message still run (D2). Paths are JSONPath-like, into the response as OpenAI sends
/// it: `$.choices[0].message.tool_calls[1].id`, `$.output[2].call_id`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenAiDispatchError {
    /// The Chat Completions response has no `choices`: there is no assistant message.
    #[error("the chat completion `{response_id}` has no choices: there is no assistant message to dispatch")]
    NoChoices {
        /// The response's `id`.
        response_id: String,
    },

    /// The Chat Completions response has several `choices` (a request with `n` > 1). They
    /// are alternative messages: running all of them would run calls the agent did not
    /// choose. Dispatch the chosen one with
    /// [`Dispatcher::dispatch_chat_message`](crate::dispatch::Dispatcher::dispatch_chat_message).
    #[error("the chat completion `{response_id}` has {count} alternative choices; dispatch the chosen one with `dispatch_chat_message(&response.choices[i].message, …)`")]
    MultipleChoices {
        /// The response's `id`.
        response_id: String,
        /// How many choices it has.
        count: usize,
    },

    /// A function call's id (`tool_calls[].id`, Responses `call_id`) is empty: its result
    /// could not be matched to it (D5).
    #[error("the tool call at {path} has an empty id: its result could not be matched to it")]
    EmptyCallId {
        /// Where the id is.
        path: String,
    },

    /// A call to a custom tool (free-form text input rather than JSON arguments): only
    /// function calls are dispatched.
    #[error("the call `{call_id}` at {path} is to the custom tool `{name}` (free-form input); only function tool calls are dispatched")]
    CustomToolCall {
        /// Where the call is.
        path: String,
        /// The call's id.
        call_id: String,
        /// The custom tool's name.
        name: String,
    },

    /// The message uses the deprecated `function_call` member, whose result shape has no
    /// call id to match.
    #[error("the message uses the deprecated `function_call` at {path}, which is not dispatched (its result has no call id); use `tool_calls`")]
    DeprecatedFunctionCall {
        /// Where the member is.
        path: String,
    },

    /// A call ran, but its provider-shaped result (D5) could not be read as the
    /// async-openai type named by `target`. The calls have run and their outcomes are
    /// saved: dispatching the same response again replays them without a second effect.
    #[error(
        "the result of call `{call_id}` cannot be read as async-openai's `{target}`: {message}"
    )]
    ResultConversion {
        /// The id the result answers: the call's, or a parallel wrapper's (D7).
        call_id: String,
        /// The async-openai type: `ChatCompletionRequestToolMessage` or
        /// `FunctionCallOutputItemParam`.
        target: &'static str,
        /// serde's message.
        message: String,
    },
}
