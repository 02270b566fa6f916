//! Tool arguments as the tools read them, and the error a tool call ends
//! in: shared by tools.rs, files.rs and operator.rs (none imports another
//! for them).

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{0}")]
    BadArgs(String),
    /// fd 0 or the signal mask could not be lent to the call (lend.rs).
    #[error(transparent)]
    Lend(#[from] super::lend::LendError),
    #[error("the verdict as JSON: {0}")]
    Verdict(serde_json::Error),
}

pub(crate) fn str_arg<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>, ToolError> {
    match &args[key] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        _ => Err(ToolError::BadArgs(format!("{key} must be a string"))),
    }
}

pub(crate) fn required<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    str_arg(args, key)?.ok_or_else(|| ToolError::BadArgs(format!("{key} is required")))
}
