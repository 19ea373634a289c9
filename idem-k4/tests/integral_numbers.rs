//! D8 with K4: with serde_json's `arbitrary_precision` on, a `Value`'s number keeps its
//! text and reaches serde as a private one-member map when the text is neither an integer
//! nor its double's shortest spelling (`5.7e1`), and serde_json's own integer
//! deserializers parse the text as an integer (refusing `57.0`). A dispatched tool's
//! integer parameters must still read integral numbers whatever their spelling, and refuse
//! fractions and out-of-range numbers with the same messages as in the default build.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use idem_runtime::dispatch::{FailureKind, Tool, ToolReply};
use idem_runtime::{CallContext, ToolError};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
struct Args {
    a: u64,
    b: Option<i8>,
    items: Option<Vec<u32>>,
}

/// A sync tool echoing its typed arguments.
fn echo() -> Tool {
    Tool::from_sync("echo", |args: Args, _ctx| {
        Ok::<_, ToolError>(serde_json::json!([args.a, args.b, args.items]))
    })
}

/// Calls `tool` with the arguments written as `text` (the numbers keep their spelling).
/// A sync tool's reply is ready at once: polled with a no-op waker.
fn call(tool: &Tool, text: &str) -> ToolReply {
    let arguments: Value = serde_json::from_str(text).unwrap();
    let mut future = pin!(tool.call(arguments, CallContext::new()));
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(reply) => reply,
        Poll::Pending => panic!("a sync tool's reply is ready"),
    }
}

// pins D8, K4: this build keeps number text (else the other tests prove nothing)
#[test]
fn numbers_keep_their_text_in_this_build() {
    let value: Value = serde_json::from_str("[57.0, 5.7e1]").unwrap();
    assert_eq!(value.to_string(), "[57.0,5.7e+1]");
    // serde_json's own u64 deserializer parses the text, and refuses a float spelling.
    assert!(u64::deserialize(&value[0]).is_err());
}

// pins D8, K4: integral numbers fit integer parameters whatever their spelling
#[test]
fn integral_numbers_fit_with_arbitrary_precision() {
    let tool = echo();
    for (text, expected) in [
        (r#"{"a": 57}"#, "[57,null,null]"),
        (r#"{"a": 57.0}"#, "[57,null,null]"),
        (r#"{"a": 5.7e1}"#, "[57,null,null]"),
        (r#"{"a": 570E-1, "b": -3.0}"#, "[57,-3,null]"),
        (r#"{"a": -0.0, "b": -0.3e1}"#, "[0,-3,null]"),
        (r#"{"a": 1.0, "items": [1.0, 2e0, 3]}"#, "[1,null,[1,2,3]]"),
        (
            r#"{"a": 1.8446744073709550e19}"#,
            "[18446744073709549568,null,null]",
        ),
    ] {
        let reply = call(&tool, text);
        assert_eq!(
            reply.result.map(|v| v.to_string()),
            Ok(expected.to_owned()),
            "{text}"
        );
    }
}

// pins D8, K4: fractions and out-of-range numbers are refused, naming the path, as in the
// default build
#[test]
fn fractions_and_out_of_range_numbers_are_refused_with_arbitrary_precision() {
    let tool = echo();
    for (text, message) in [
        (
            r#"{"a": 57.5}"#,
            "argument `a`: invalid type: floating point `57.5`, expected u64",
        ),
        (
            r#"{"a": 5.75e1}"#,
            "argument `a`: invalid type: floating point `57.5`, expected u64",
        ),
        (
            r#"{"a": -1.0}"#,
            "argument `a`: invalid value: integer `-1`, expected u64",
        ),
        (
            r#"{"a": 1, "b": 1.28e2}"#,
            "argument `b`: invalid value: integer `128`, expected i8",
        ),
        (
            r#"{"a": 1.8446744073709552e19}"#,
            "argument `a`: invalid value: floating point `1.8446744073709552e+19`, expected u64",
        ),
        (
            r#"{"a": 1, "items": [1.0, 2.5e0]}"#,
            "argument `items[1]`: invalid type: floating point `2.5`, expected u32",
        ),
        (
            r#"{"a": "57"}"#,
            "argument `a`: invalid type: string \"57\", expected u64",
        ),
    ] {
        let failure = call(&tool, text).result.unwrap_err();
        assert_eq!(failure.kind, FailureKind::BadArguments, "{text}");
        assert_eq!(
            failure.message,
            format!("arguments do not fit tool `echo`: {message}"),
            "{text}"
        );
    }
}

// pins D8, K4: other parameter types see the number as serde_json gives it
#[test]
fn other_types_keep_the_number_with_arbitrary_precision() {
    #[derive(Deserialize)]
    struct Other {
        x: f64,
        raw: Value,
    }
    let tool = Tool::from_sync("other", |o: Other, _ctx| {
        Ok::<_, ToolError>(serde_json::json!([o.x, o.raw.to_string()]))
    });
    let reply = call(&tool, r#"{"x": 57.5, "raw": 57.0}"#);
    assert_eq!(reply.result, Ok(serde_json::json!([57.5, "57.0"])));
    let reply = call(&tool, r#"{"x": 5.75e1, "raw": 5.7e1}"#);
    assert_eq!(reply.result, Ok(serde_json::json!([57.5, "5.7e+1"])));
}
