//! Server-sent events: reading an upstream's answer, writing events to the client
//! (contract Y10).

use super::*;

/// What an upstream answered to one request.
pub(super) enum Answer {
    /// Its JSON-RPC response.
    Message(Map<String, Value>),
    /// No response to it: the answer ended without one.
    None,
}

/// The JSON-RPC response to `id` in an upstream answer (JSON, or an SSE stream whose other
/// events go to `relay`).
pub(super) async fn read_answer(
    response: Response<Incoming>,
    id: &Id,
    relay: &mut (dyn FnMut(Sse) + Send),
) -> Result<Answer, String> {
    if is_sse(response.headers()) {
        let mut events = SseStream::new(response.into_body());
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| format!("the upstream's event stream broke: {e}"))?;
            let message = event.data.as_deref().map(jsonrpc::parse);
            match message {
                Some(Ok(Message::Response {
                    id: answered, body, ..
                })) if answered.text() == id.text() => return Ok(Answer::Message(body)),
                _ => relay(event),
            }
        }
        return Ok(Answer::None);
    }
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("the upstream's answer broke: {e}"))?
        .to_bytes();
    Ok(match serde_json::from_slice::<Map<String, Value>>(&bytes) {
        Ok(message) => Answer::Message(message),
        Err(_) => Answer::None,
    })
}

pub(super) async fn parse_sse(bytes: Bytes) -> Vec<Sse> {
    let stream = futures_util::stream::iter([Ok::<_, std::io::Error>(bytes)]);
    SseStream::from_bytes_stream(stream)
        .filter_map(|event| async move { event.ok() })
        .collect()
        .await
}

/// An SSE event as bytes; a multi-line `data` becomes several `data:` lines.
pub(super) fn encode_sse(event: &Sse) -> Bytes {
    let mut out = String::new();
    if let Some(name) = &event.event {
        out.push_str(&format!("event: {name}\n"));
    }
    if let Some(id) = &event.id {
        out.push_str(&format!("id: {id}\n"));
    }
    if let Some(retry) = event.retry {
        out.push_str(&format!("retry: {retry}\n"));
    }
    if let Some(data) = &event.data {
        for line in data.split('\n') {
            out.push_str(&format!("data: {line}\n"));
        }
    }
    out.push('\n');
    Bytes::from(out)
}

pub(super) fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// The upstream's event stream for a keyed call, as relayed, with the upstream's headers
/// (its `Mcp-Session-Id`…).
pub(super) fn sse_response(
    events: mpsc::UnboundedReceiver<Bytes>,
    headers: HeaderMap,
) -> Response<Body> {
    let stream = tokio_stream_from(events).map(|bytes| Ok::<_, BoxError>(Frame::data(bytes)));
    let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
    *response.headers_mut() = headers;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

pub(super) fn tokio_stream_from(
    mut receiver: mpsc::UnboundedReceiver<Bytes>,
) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins Y10: events are written back as SSE, multi-line data as several lines
    #[test]
    fn events_are_encoded_line_by_line() {
        let event = Sse::default().event("message").data("{\n}").id("7");
        assert_eq!(
            encode_sse(&event),
            Bytes::from("event: message\nid: 7\ndata: {\ndata: }\n\n")
        );
    }
}
