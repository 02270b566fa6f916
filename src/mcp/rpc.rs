//! JSON-RPC 2.0 as MCP's stdio transport carries it: one message per line,
//! UTF-8, no embedded newlines. Parsing and the reply shapes only; what a
//! method does is mod.rs's.

use serde_json::{Value, json};
use std::io::BufRead;

/// The longest message read (a write_file's content travels inside one).
pub const MAX_LINE: usize = 32 << 20;

/// JSON-RPC error codes used here.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;

/// One message from the client.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// A request: it gets exactly one reply with the same id.
    Request { id: Value, method: String, params: Value },
    /// A notification (no id): never answered.
    Notification { method: String },
    /// A reply to something we sent (we send no requests): ignored.
    Response,
    /// Not a message we can act on; answered with this error (id null when
    /// the id could not be read).
    Invalid { id: Value, code: i64, message: String },
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading stdin: {0}")]
    Io(#[from] std::io::Error),
    #[error("a message longer than {MAX_LINE} bytes")]
    TooLong,
}

/// The next line of at most `MAX_LINE` bytes, without its newline; `None`
/// at EOF. An overlong line is consumed to its end and reported, so the
/// stream stays in step.
pub fn read_line(input: &mut impl BufRead) -> Result<Option<Vec<u8>>, ReadError> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            if line.is_empty() && !too_long {
                return Ok(None);
            }
            break;
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if line.len() + chunk.len() > MAX_LINE {
            too_long = true;
            line.clear();
        } else if !too_long {
            line.extend_from_slice(chunk);
        }
        let used = done.unwrap_or(buf.len());
        input.consume(used);
        if done.is_some() {
            break;
        }
    }
    if too_long {
        return Err(ReadError::TooLong);
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(line))
}

/// Classifies one line.
pub fn parse(line: &[u8]) -> Incoming {
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return invalid(Value::Null, PARSE_ERROR, format!("not JSON: {e}")),
    };
    let Value::Object(obj) = v else {
        // Batches (arrays) were dropped from MCP in 2025-06-18.
        return invalid(Value::Null, INVALID_REQUEST, "a message must be one JSON object (no batches)".into());
    };
    let id = obj.get("id").cloned();
    if let Some(id) = &id
        && !(id.is_string() || id.is_i64() || id.is_u64())
    {
        return invalid(Value::Null, INVALID_REQUEST, "id must be a string or an integer".into());
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id.unwrap_or(Value::Null), INVALID_REQUEST, "jsonrpc must be \"2.0\"".into());
    }
    let Some(method) = obj.get("method") else {
        return if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) {
            Incoming::Response
        } else {
            invalid(id.unwrap_or(Value::Null), INVALID_REQUEST, "no method".into())
        };
    };
    let Some(method) = method.as_str() else {
        return invalid(id.unwrap_or(Value::Null), INVALID_REQUEST, "method must be a string".into());
    };
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    if !(params.is_null() || params.is_object()) {
        return invalid(id.unwrap_or(Value::Null), INVALID_PARAMS, "params must be an object".into());
    }
    match id {
        Some(id) => Incoming::Request { id, method: method.to_string(), params },
        None => Incoming::Notification { method: method.to_string() },
    }
}

fn invalid(id: Value, code: i64, message: String) -> Incoming {
    Incoming::Invalid { id, code, message }
}

pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_notifications_and_garbage_are_told_apart() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Incoming::Request { id: json!(1), method: "tools/list".into(), params: Value::Null }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Incoming::Notification { method: "notifications/initialized".into() }
        );
        assert_eq!(parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#), Incoming::Response);
        for (line, code) in [
            (&b"{not json"[..], PARSE_ERROR),
            (b"[]", INVALID_REQUEST),
            (b"42", INVALID_REQUEST),
            (br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1,"method":7}"#, INVALID_REQUEST),
            (br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#, INVALID_PARAMS),
            (br#"{"jsonrpc":"2.0","id":1}"#, INVALID_REQUEST),
        ] {
            match parse(line) {
                Incoming::Invalid { code: c, .. } => assert_eq!(c, code, "{}", String::from_utf8_lossy(line)),
                other => panic!("{} parsed as {other:?}", String::from_utf8_lossy(line)),
            }
        }
    }

    #[test]
    fn an_overlong_line_is_refused_and_the_next_one_still_read() {
        let mut data = vec![b'x'; MAX_LINE + 10];
        data.extend_from_slice(b"\n{\"a\":1}\r\n");
        let mut r = std::io::BufReader::with_capacity(4096, &data[..]);
        assert!(matches!(read_line(&mut r), Err(ReadError::TooLong)));
        assert_eq!(read_line(&mut r).unwrap().unwrap(), b"{\"a\":1}");
        assert_eq!(read_line(&mut r).unwrap(), None);
    }
}
