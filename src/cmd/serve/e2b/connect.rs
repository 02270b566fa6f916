//! The Connect protocol as envd speaks it to the SDKs: JSON messages
//! (the SDKs' `useBinaryFormat: false`), unary calls as plain JSON bodies,
//! server streams as enveloped messages (`application/connect+json`: one
//! flags byte, a 4-byte big-endian length, the message; flag 0x02 marks the
//! end-of-stream message, which carries an error if the call failed).

use super::super::{ApiError, Conn, Reply};
use crate::serve::http;
use serde_json::{Value, json};
use std::io::Write;

/// A Connect error code (the protocol's snake_case names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    InvalidArgument,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    Unimplemented,
    Internal,
}

impl Code {
    pub fn name(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid_argument",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
        }
    }

    /// The HTTP status a unary error goes with (the Connect spec's table).
    fn status(self) -> u16 {
        match self {
            Code::InvalidArgument => 400,
            Code::NotFound => 404,
            Code::AlreadyExists => 409,
            Code::PermissionDenied => 403,
            Code::Unimplemented => 501,
            Code::Internal => 500,
        }
    }
}

/// A failed RPC.
#[derive(Debug)]
pub struct RpcError {
    pub code: Code,
    pub message: String,
}

impl RpcError {
    pub fn new(code: Code, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into() }
    }

    pub fn unary(&self) -> Reply {
        Reply::Json(self.code.status(), json!({"code": self.code.name(), "message": self.message}))
    }
}

/// A husk API failure as the Connect code the SDK maps to its own
/// exceptions (404: NotFoundException, 409: busy, 501: not supported).
impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> RpcError {
        let code = match e.status {
            400 => Code::InvalidArgument,
            404 => Code::NotFound,
            409 => Code::AlreadyExists,
            403 => Code::PermissionDenied,
            501 => Code::Unimplemented,
            _ => Code::Internal,
        };
        let hint = e.hint.map(|h| format!(" ({h})")).unwrap_or_default();
        RpcError::new(code, format!("{}{hint}", e.message))
    }
}

/// The message of a request: unary calls send it bare, streaming ones
/// enveloped (the first envelope is the request).
pub fn request(head: &Head, body: &[u8]) -> Result<Value, RpcError> {
    let ctype = head.header("content-type").unwrap_or("");
    let msg = if ctype.starts_with("application/connect+") {
        match body {
            [_flags, a, b, c, d, rest @ ..] => {
                let n = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
                rest.get(..n).ok_or_else(|| RpcError::new(Code::InvalidArgument, "a truncated envelope"))?
            }
            _ => return Err(RpcError::new(Code::InvalidArgument, "no request envelope")),
        }
    } else {
        body
    };
    if msg.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(msg)
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("the request is not JSON: {e}")))
}

use crate::serve::http::Head;

/// One enveloped message.
pub fn envelope(flags: u8, msg: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(msg).unwrap_or_default();
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(flags);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// A server stream on the connection: its head goes out on `start`.
pub struct Stream<'c> {
    conn: &'c mut Conn,
}

impl<'c> Stream<'c> {
    pub fn start(conn: &'c mut Conn) -> Result<Stream<'c>, ApiError> {
        http::write_stream_head(conn, 200, "application/connect+json")
            .map_err(|e| ApiError::new(500, "serve", format!("writing the stream's head: {e}")))?;
        Ok(Stream { conn })
    }

    pub fn conn(&self) -> &Conn {
        self.conn
    }

    /// One message; false once the client is gone.
    pub fn send(&mut self, msg: &Value) -> bool {
        self.conn.write_all(&envelope(0, msg)).and_then(|_| self.conn.flush()).is_ok()
    }

    /// The end-of-stream message, with the error if the call failed.
    pub fn end(self, error: Option<RpcError>) -> Reply {
        let end = match error {
            Some(e) => json!({"error": {"code": e.code.name(), "message": e.message}}),
            None => json!({}),
        };
        let _ = self.conn.write_all(&envelope(2, &end)).and_then(|_| self.conn.flush());
        self.conn.finish();
        Reply::Streamed
    }
}

/// A stream that failed before its first message: the end message alone.
pub fn failed_stream(conn: &mut Conn, e: RpcError) -> Result<Reply, ApiError> {
    Ok(Stream::start(conn)?.end(Some(e)))
}
