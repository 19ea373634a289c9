//! OpenAI parallel wrappers (contract D7): one call the model emitted in place of several.
//!
//! A call named `multi_tool_use.parallel` (OpenAI Chat Completions or Responses), or
//! `parallel` (Responses) whose arguments hold a `tool_uses` member, has the arguments
//!
//! ```json
//! {"tool_uses": [{"recipient_name": "functions.get_weather", "parameters": {"city": "Oslo"}},
//!                {"recipient_name": "functions.get_time", "parameters": {"tz": "CET"}}]}
//! ```
//!
//! Each entry `i` becomes its own [`ToolCall`], at the wrapper's place in the turn: the tool
//! named by `recipient_name` without its `functions.` prefix (a name without the prefix is
//! taken as is), `parameters` as its arguments (absent or `null`: `{}`), the id
//! `"<wrapper id>:<i>"` marked [`id_synthesized`](ToolCall::id_synthesized) (it is never
//! sent to the provider), the wrapper's `turn_id`, and
//! [`wrapped_in`](ToolCall::wrapped_in) naming the wrapper and the position. The entry is
//! keyed on its own tool and arguments, as the same call outside a wrapper is; its result
//! goes back as one text part of the wrapper's single result (see
//! [`results`](crate::dispatch::results)).
//!
//! A wrapper whose arguments are JSON but not that shape stays one call (the wrapper's id
//! and name) with [`ArgumentError::MalformedParallelWrapper`] naming the member inside the
//! arguments: it runs nothing, and the message's other calls still run (D2). A wrapper
//! whose arguments are not JSON at all keeps its ordinary [`ArgumentError`].
//!
//! The wrapper is not part of OpenAI's documented API: it is ChatGPT's internal tool for
//! parallel calls (the developer's functions live in its `functions` namespace), which
//! models sometimes emit on the API instead of several calls. Source: OpenAI developer
//! community, "Parallel Assistant Function calls returning undocumented function
//! multi_tool_use.parallel"
//! (<https://community.openai.com/t/parallel-assistant-function-calls-returning-undocumented-function-multi-tool-use-parallel/697047>),
//! which shows this argument shape.

use serde_json::{Map, Value};

use super::path::{describe, JsonPath};
use crate::dispatch::turn::ArgumentError;
use crate::dispatch::{ParallelWrapper, Provider, ToolCall};

/// The wrapper's name on both OpenAI APIs.
pub(crate) const WRAPPER: &str = "multi_tool_use.parallel";

/// The wrapper's short name, seen on the Responses API only (and there only with a
/// `tool_uses` member: without one it is a call to a user tool named `parallel`).
const SHORT_WRAPPER: &str = "parallel";

/// The prefix of ChatGPT's function namespace in `recipient_name`.
const NAMESPACE: &str = "functions.";

/// Whether a call of `provider` named `name` is a parallel wrapper whatever its arguments
/// hold: `multi_tool_use.parallel` on either OpenAI API.
pub(crate) fn is_wrapper_name(provider: Provider, name: &str) -> bool {
    matches!(provider, Provider::OpenAiChat | Provider::OpenAiResponses) && name == WRAPPER
}

/// Whether `call` is a parallel wrapper (D7): [`is_wrapper_name`], or a Responses call
/// named `parallel` whose arguments are an object with a `tool_uses` member.
fn is_wrapper(call: &ToolCall) -> bool {
    let holds_tool_uses = || {
        call.arguments
            .as_ref()
            .is_ok_and(|arguments| arguments.get("tool_uses").is_some())
    };
    is_wrapper_name(call.provider, &call.name)
        || (call.provider == Provider::OpenAiResponses
            && call.name == SHORT_WRAPPER
            && holds_tool_uses())
}

/// The calls `call` stands for, read at `arguments_path` (where its arguments are in the
/// document): its wrapped calls when it is a parallel wrapper with well-formed arguments,
/// else `call` alone (an ordinary call, a wrapper whose arguments are unusable, or a
/// wrapper turned into one call with [`ArgumentError::MalformedParallelWrapper`]).
pub(crate) fn unwrap(call: ToolCall, arguments_path: &JsonPath) -> Vec<ToolCall> {
    if !is_wrapper(&call) {
        return vec![call];
    }
    let Ok(arguments) = &call.arguments else {
        return vec![call];
    };
    match entries(arguments) {
        Ok(entries) => {
            let wrapper = |position| ParallelWrapper {
                id: call.id.clone(),
                name: call.name.clone(),
                position,
            };
            entries
                .into_iter()
                .enumerate()
                .map(|(position, (name, arguments))| ToolCall {
                    provider: call.provider,
                    id: format!("{}:{position}", call.id),
                    id_synthesized: true,
                    name,
                    arguments: Ok(arguments),
                    request_id: None,
                    turn_id: call.turn_id.clone(),
                    wrapped_in: Some(wrapper(position)),
                })
                .collect()
        }
        Err(problem) => vec![ToolCall {
            arguments: Err(ArgumentError::MalformedParallelWrapper {
                path: arguments_path.clone().into_string(),
                member: problem.member,
                expected: problem.expected,
                found: problem.found,
            }),
            ..call
        }],
    }
}

/// What is wrong with a wrapper's arguments: the first member that is not the shape.
struct Problem {
    /// Where, inside the arguments: `tool_uses`, `tool_uses[1].recipient_name`.
    member: String,
    expected: &'static str,
    found: String,
}

impl Problem {
    fn at(member: &JsonPath, expected: &'static str, found: Option<&Value>) -> Self {
        Problem {
            member: inner_path(member),
            expected,
            found: found.map_or_else(|| "nothing".to_owned(), describe),
        }
    }
}

/// A path inside the arguments, written without the leading `$`: `tool_uses[1].parameters`.
fn inner_path(path: &JsonPath) -> String {
    let path = path.clone().into_string();
    match path.strip_prefix("$.") {
        Some(rest) => rest.to_owned(),
        None => path.strip_prefix('$').unwrap_or(&path).to_owned(),
    }
}

/// The `(tool name, arguments)` of each entry of a wrapper's arguments, in order.
fn entries(arguments: &Value) -> Result<Vec<(String, Value)>, Problem> {
    let root = JsonPath::root();
    let uses_path = root.key("tool_uses");
    let uses = match arguments.get("tool_uses") {
        Some(Value::Array(uses)) if !uses.is_empty() => uses,
        other => {
            return Err(Problem::at(
                &uses_path,
                "a non-empty array of tool uses",
                other,
            ))
        }
    };
    uses.iter()
        .enumerate()
        .map(|(i, entry)| {
            let entry_path = uses_path.index(i);
            let Value::Object(entry) = entry else {
                return Err(Problem::at(
                    &entry_path,
                    "a tool use object {\"recipient_name\",\"parameters\"}",
                    Some(entry),
                ));
            };
            let recipient = entry.get("recipient_name");
            let Some(Value::String(recipient)) = recipient else {
                return Err(Problem::at(
                    &entry_path.key("recipient_name"),
                    "the tool's name (a string, \"functions.NAME\")",
                    recipient,
                ));
            };
            let name = recipient.strip_prefix(NAMESPACE).unwrap_or(recipient);
            let arguments = match entry.get("parameters") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(parameters @ Value::Object(_)) => parameters.clone(),
                Some(other) => {
                    return Err(Problem::at(
                        &entry_path.key("parameters"),
                        "the tool's arguments (an object)",
                        Some(other),
                    ))
                }
            };
            Ok((name.to_owned(), arguments))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::dispatch::{parse_turns, Turn};

    /// The arguments string of a wrapper with four different entries.
    fn four_uses() -> String {
        json!({"tool_uses": [
            {"recipient_name": "functions.get_weather", "parameters": {"city": "Oslo"}},
            {"recipient_name": "functions.get_time", "parameters": {"tz": "CET"}},
            {"recipient_name": "functions.send_refund", "parameters": {"order": 7, "cents": 1250}},
            {"recipient_name": "functions.list_orders"},
        ]})
        .to_string()
    }

    /// `(id, name, arguments)` of each call of `turn`.
    fn summary(turn: &Turn) -> Vec<(String, String, Value)> {
        turn.calls
            .iter()
            .map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone().unwrap()))
            .collect()
    }

    /// What [`four_uses`] unwraps to, under the wrapper id `w`.
    fn four_calls() -> Vec<(String, String, Value)> {
        [
            ("w:0", "get_weather", json!({"city": "Oslo"})),
            ("w:1", "get_time", json!({"tz": "CET"})),
            ("w:2", "send_refund", json!({"order": 7, "cents": 1250})),
            ("w:3", "list_orders", json!({})),
        ]
        .into_iter()
        .map(|(id, name, arguments)| (id.to_owned(), name.to_owned(), arguments))
        .collect()
    }

    fn chat_wrapper(name: &str) -> Value {
        json!({"id": "w", "type": "function", "function": {"name": name, "arguments": four_uses()}})
    }

    fn responses_wrapper(name: &str) -> Value {
        json!({"type": "function_call", "id": "fc_1", "call_id": "w", "name": name, "arguments": four_uses()})
    }

    // pins D7, D1: every Chat Completions reader unwraps four different entries into calls
    // `w:0`..`w:3` to the tools without `functions.`: a response, a bare message, a history
    #[test]
    fn chat_readers_unwrap() {
        let message =
            json!({"role": "assistant", "content": null, "tool_calls": [chat_wrapper(WRAPPER)]});
        let response = json!({"id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]});
        let history = json!([
            {"role": "user", "content": "weather, time, refund, orders"},
            message,
            {"role": "tool", "tool_call_id": "w", "content": "…"},
        ]);
        for document in [response, message.clone(), history] {
            let turns = parse_turns(&document).unwrap();
            assert_eq!(turns.len(), 1, "{document}");
            assert_eq!(turns[0].provider, Provider::OpenAiChat);
            assert_eq!(summary(&turns[0]), four_calls(), "{document}");
            assert!(turns[0].calls.iter().all(|c| c.id_synthesized));
        }
    }

    // pins D7, D1: every Responses reader unwraps, under both names: a response, one item,
    // an item list
    #[test]
    fn responses_readers_unwrap_both_names() {
        for name in [WRAPPER, SHORT_WRAPPER] {
            let item = responses_wrapper(name);
            let response = json!({"id": "resp_1", "object": "response", "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []}, item]});
            let items = json!([
                {"role": "user", "content": "weather, time, refund, orders"},
                item,
                {"type": "function_call_output", "call_id": "w", "output": "…"},
            ]);
            for document in [response, item.clone(), items] {
                let turns = parse_turns(&document).unwrap();
                assert_eq!(turns.len(), 1, "{document}");
                assert_eq!(turns[0].provider, Provider::OpenAiResponses);
                assert_eq!(summary(&turns[0]), four_calls(), "{document}");
                let wrapper = turns[0].calls[3].wrapped_in.clone().unwrap();
                assert_eq!(
                    (wrapper.id.as_str(), wrapper.name.as_str(), wrapper.position),
                    ("w", name, 3)
                );
            }
        }
    }

    // pins D7: a wrapper's calls take its place: an ordinary call before and after it keep
    // their order around them
    #[test]
    fn a_wrapper_keeps_its_place_in_the_turn() {
        let ordinary = |id: &str| {
            json!({"id": id, "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}})
        };
        let message = json!({"role": "assistant", "tool_calls": [ordinary("a"), chat_wrapper(WRAPPER), ordinary("b")]});
        let turns = parse_turns(&message).unwrap();
        let ids: Vec<&str> = turns[0].calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "w:0", "w:1", "w:2", "w:3", "b"]);
        assert_eq!(turns[0].calls[0].wrapped_in, None);
        assert!(!turns[0].calls[5].id_synthesized);

        let call = |call_id: &str| {
            json!({"type": "function_call", "call_id": call_id,
            "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"})
        };
        let response = json!({"object": "response", "output": [call("a"), responses_wrapper(WRAPPER), call("b")]});
        let turns = parse_turns(&response).unwrap();
        let ids: Vec<&str> = turns[0].calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "w:0", "w:1", "w:2", "w:3", "b"]);
    }

    // pins D7: a Responses call named `parallel` without `tool_uses` is an ordinary call to
    // a tool named `parallel`; on Chat Completions `parallel` is never a wrapper
    #[test]
    fn parallel_without_tool_uses_is_an_ordinary_call() {
        let item = json!({"type": "function_call", "call_id": "c", "name": "parallel",
            "arguments": "{\"jobs\":4}"});
        let turns = parse_turns(&item).unwrap();
        assert_eq!(turns[0].calls.len(), 1);
        let call = &turns[0].calls[0];
        assert_eq!((call.id.as_str(), call.name.as_str()), ("c", "parallel"));
        assert_eq!(call.arguments, Ok(json!({"jobs": 4})));
        assert_eq!(call.wrapped_in, None);

        let chat = json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "parallel", "arguments": four_uses()}}]});
        let turns = parse_turns(&chat).unwrap();
        assert_eq!(turns[0].calls.len(), 1);
        assert_eq!(turns[0].calls[0].name, "parallel");
    }

    // pins D7, D2: a wrapper whose arguments are not JSON keeps the ordinary argument error
    #[test]
    fn arguments_that_are_not_json_stay_one_call() {
        let message = json!({"role": "assistant", "tool_calls": [{"id": "w", "type": "function",
            "function": {"name": WRAPPER, "arguments": "{\"tool_uses\": ["}}]});
        let turns = parse_turns(&message).unwrap();
        assert_eq!(turns[0].calls.len(), 1);
        assert_eq!(turns[0].calls[0].id, "w");
        assert!(matches!(
            &turns[0].calls[0].arguments,
            Err(ArgumentError::InvalidJson { path, .. }) if path == "$.tool_calls[0].function.arguments"
        ));
    }

    fn wrapper(provider: Provider, name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            provider,
            id: "w".into(),
            id_synthesized: false,
            name: name.into(),
            arguments: Ok(arguments),
            request_id: None,
            turn_id: Some("chatcmpl-1".into()),
            wrapped_in: None,
        }
    }

    fn path() -> JsonPath {
        JsonPath::root().key("tool_calls").index(0).key("arguments")
    }

    // pins D7: entries become calls `w:i` to the named tools, `functions.` removed (a name
    // without it taken as is), absent or null parameters `{}`, the wrapper's turn id
    #[test]
    fn entries_become_calls() {
        let call = wrapper(
            Provider::OpenAiChat,
            WRAPPER,
            json!({"tool_uses": [
                {"recipient_name": "functions.a", "parameters": {"x": 1}},
                {"recipient_name": "b"},
                {"recipient_name": "functions.c", "parameters": null},
            ]}),
        );
        let calls = unwrap(call, &path());
        let seen: Vec<_> = calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.clone()))
            .collect();
        assert_eq!(
            seen,
            [
                ("w:0", "a", Ok(json!({"x": 1}))),
                ("w:1", "b", Ok(json!({}))),
                ("w:2", "c", Ok(json!({}))),
            ]
        );
        for (i, call) in calls.iter().enumerate() {
            assert!(call.id_synthesized);
            assert_eq!(call.turn_id.as_deref(), Some("chatcmpl-1"));
            assert_eq!(
                call.wrapped_in,
                Some(ParallelWrapper {
                    id: "w".into(),
                    name: WRAPPER.into(),
                    position: i
                })
            );
        }
    }

    // pins D7: the short name is a wrapper on Responses only, and only with `tool_uses`
    #[test]
    fn the_short_name_needs_responses_and_tool_uses() {
        let uses = json!({"tool_uses": [{"recipient_name": "functions.a"}]});
        let unwrapped = |provider, arguments: &Value| {
            unwrap(wrapper(provider, "parallel", arguments.clone()), &path())[0]
                .wrapped_in
                .is_some()
        };
        assert!(unwrapped(Provider::OpenAiResponses, &uses));
        assert!(!unwrapped(Provider::OpenAiChat, &uses));
        assert!(!unwrapped(Provider::OpenAiResponses, &json!({"n": 2})));
        let anthropic = wrapper(Provider::Anthropic, WRAPPER, uses);
        assert_eq!(unwrap(anthropic.clone(), &path()), vec![anthropic]);
    }

    // pins D7, D2: a malformed wrapper is one call whose error names the member
    #[test]
    fn malformed_arguments_name_the_member() {
        let cases = [
            (json!({}), "tool_uses", "nothing"),
            (
                json!({"tool_uses": []}),
                "tool_uses",
                "an array of 0 elements",
            ),
            (
                json!({"tool_uses": {"a": 1}}),
                "tool_uses",
                "an object with members [\"a\"]",
            ),
            (
                json!({"tool_uses": [{"recipient_name": "a"}, 3]}),
                "tool_uses[1]",
                "a number",
            ),
            (
                json!({"tool_uses": [{"parameters": {}}]}),
                "tool_uses[0].recipient_name",
                "nothing",
            ),
            (
                json!({"tool_uses": [{"recipient_name": 7}]}),
                "tool_uses[0].recipient_name",
                "a number",
            ),
            (
                json!({"tool_uses": [{"recipient_name": "a", "parameters": "{}"}]}),
                "tool_uses[0].parameters",
                "a string",
            ),
        ];
        for (arguments, member, found) in cases {
            let calls = unwrap(wrapper(Provider::OpenAiChat, WRAPPER, arguments), &path());
            assert_eq!(calls.len(), 1);
            assert_eq!(
                (calls[0].id.as_str(), calls[0].name.as_str()),
                ("w", WRAPPER)
            );
            match &calls[0].arguments {
                Err(ArgumentError::MalformedParallelWrapper {
                    path,
                    member: m,
                    found: f,
                    ..
                }) => {
                    assert_eq!(path, "$.tool_calls[0].arguments");
                    assert_eq!((m.as_str(), f.as_str()), (member, found));
                }
                other => panic!("{member}: {other:?}"),
            }
        }
    }
}
