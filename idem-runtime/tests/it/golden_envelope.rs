//! The stored outcome format is pinned (contract S11): these strings are what every store
//! holds. Changing any of them is a breaking change of the stored format and must bump
//! `Envelope::VERSION` (and keep a decoder for the old version). Object members are written
//! in RFC 8785 order (sorted by UTF-16 code units), whatever the struct's field order.

use serde::{Deserialize, Serialize};

use idem_runtime::{Envelope, ToolError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    refund_id: String,
    amount_cents: u64,
    settled: bool,
    fee: f64,
    memo: Option<String>,
}

fn receipt() -> Receipt {
    Receipt {
        refund_id: "re_1".into(),
        amount_cents: 9_007_199_254_740_993,
        settled: false,
        fee: 0.1,
        memo: None,
    }
}

const GOLDEN_OK: &str = r#"{"version":1,"ok":{"amount_cents":9007199254740993,"fee":0.1,"memo":null,"refund_id":"re_1","settled":false}}"#;
const GOLDEN_ERR: &str = r#"{"version":1,"err":{"failed":"card declined"}}"#;

// pins S11: the envelope of an Ok value, byte for byte
#[test]
fn ok_envelope_is_pinned() {
    let envelope = Envelope::encode_ok(&receipt()).unwrap();
    assert_eq!(envelope.as_str(), GOLDEN_OK);
    assert_eq!(Envelope::VERSION, 1);
}

// pins S11, S4: the envelope of a saved Err value, byte for byte
#[test]
fn err_envelope_is_pinned() {
    let envelope = Envelope::encode_err(&ToolError::failed("card declined")).unwrap();
    assert_eq!(envelope.as_str(), GOLDEN_ERR);
}

// pins S11, S3: stored envelopes decode to exactly the values that were saved
#[test]
fn golden_envelopes_decode_exactly() {
    let ok = Envelope::from_stored(GOLDEN_OK)
        .decode::<Receipt, ToolError>()
        .unwrap();
    assert_eq!(ok, Ok(receipt()));
    let err = Envelope::from_stored(GOLDEN_ERR)
        .decode::<Receipt, ToolError>()
        .unwrap();
    assert_eq!(err, Err(ToolError::failed("card declined")));
}

// pins S11: a stored envelope that does not fit the tool's type is an error, not a panic
#[test]
fn envelope_of_another_type_is_a_decode_error() {
    let wrong = Envelope::from_stored(GOLDEN_OK).decode::<Vec<u8>, ToolError>();
    assert!(wrong.is_err());
}
