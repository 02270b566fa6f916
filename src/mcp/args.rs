//! Tool arguments as the tools read them, and the error a tool call ends
//! in: shared by tools.rs, files.rs and operator.rs (none imports another
//! for them).

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A tool argument husk refuses (step `arguments`).
    #[error("{0}")]
    BadArgs(String),
    /// A sandbox_id this session did not make, or has forgotten (step
    /// `sandbox`): the tools act only on the session's own sandboxes.
    #[error("no sandbox {id:?} of this session (live: {}); create one with create_sandbox", if live.is_empty() { "none".to_string() } else { live.join(", ") })]
    NotInSession { id: String, live: Vec<String> },
    /// fd 0 or the signal mask could not be lent to the call (lend.rs).
    #[error(transparent)]
    Lend(#[from] super::lend::LendError),
    #[error("the verdict as JSON: {0}")]
    Verdict(serde_json::Error),
}

impl ToolError {
    /// The step a failed call's structuredContent names.
    pub fn step(&self) -> crate::step::Phase {
        use crate::step::Phase;
        match self {
            ToolError::BadArgs(_) => Phase::Arguments,
            ToolError::NotInSession { .. } => Phase::Sandbox,
            ToolError::Lend(_) => Phase::Stdio,
            ToolError::Verdict(_) => Phase::Setup,
        }
    }
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
