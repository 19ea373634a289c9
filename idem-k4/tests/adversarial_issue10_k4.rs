//! Adversarial review of D8 under `arbitrary_precision` (K4): hostile spellings decode as in
//! the default build, and never as another number than the model wrote.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use idem_runtime::dispatch::{Tool, ToolReply};
use idem_runtime::{CallContext, ToolError};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
struct Narrow {
    n: i64,
}

#[derive(Debug, Deserialize)]
struct Wide {
    n: i128,
}

#[derive(Debug, Deserialize)]
struct Unsigned {
    n: u64,
}

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

fn narrow() -> Tool {
    Tool::from_sync("narrow", |a: Narrow, _ctx| {
        Ok::<_, ToolError>(a.n.to_string())
    })
}

fn wide() -> Tool {
    Tool::from_sync("wide", |a: Wide, _ctx| Ok::<_, ToolError>(a.n.to_string()))
}

fn unsigned() -> Tool {
    Tool::from_sync("unsigned", |a: Unsigned, _ctx| {
        Ok::<_, ToolError>(a.n.to_string())
    })
}

// pins D8, K4: below i64::MIN the model's integer is refused for an i64 (and read exactly
// for an i128, as this build can): never i64::MIN, as in the default build
// (idem-runtime/tests/it/adversarial_issue10.rs, integers_below_i64_min_are_refused).
#[test]
fn integers_below_i64_min_are_never_i64_min_here() {
    for text in [
        r#"{"n": -9223372036854775809}"#,
        r#"{"n": -9223372036854776000}"#,
    ] {
        let reply = call(&narrow(), text);
        assert!(reply.result.is_err(), "i64 {text}: {:?}", reply.result);
        let reply = call(&wide(), text);
        let expected = text[6..text.len() - 1].to_owned();
        assert_eq!(reply.result, Ok(Value::String(expected)), "i128 {text}");
    }
}

// pins D8, K4: the edges and hostile spellings decode as in the default build
#[test]
fn edges_as_in_the_default_build() {
    let ok = |tool: &Tool, text: &str, n: &str| {
        assert_eq!(
            call(tool, text).result,
            Ok(Value::String(n.to_owned())),
            "{text}"
        );
    };
    let refused = |tool: &Tool, text: &str| {
        let result = call(tool, text).result;
        assert!(result.is_err(), "{text}: {result:?}");
    };
    ok(&unsigned(), r#"{"n": -0}"#, "0");
    ok(&unsigned(), r#"{"n": -0.0}"#, "0");
    ok(&unsigned(), r#"{"n": -0e5}"#, "0");
    ok(
        &unsigned(),
        r#"{"n": 18446744073709551615}"#,
        "18446744073709551615",
    );
    refused(&unsigned(), r#"{"n": 18446744073709551616}"#);
    refused(&unsigned(), r#"{"n": 18446744073709551615.0}"#);
    refused(&unsigned(), r#"{"n": 1e300}"#);
    refused(&unsigned(), r#"{"n": 1e400}"#);
    refused(&unsigned(), r#"{"n": "57"}"#);
    ok(
        &narrow(),
        r#"{"n": -9223372036854775808}"#,
        "-9223372036854775808",
    );
    refused(&narrow(), r#"{"n": 9223372036854775808}"#);
    refused(&narrow(), r#"{"n": 9.223372036854775807e18}"#);
    ok(&wide(), r#"{"n": 1e2}"#, "100");
}
