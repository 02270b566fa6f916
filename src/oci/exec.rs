//! exec: a process in a running container.

use super::state::Store;
use super::{ExecArgs, OciError};

pub fn exec(_store: &Store, _a: &ExecArgs) -> Result<i32, OciError> {
    Err(OciError::Refused("exec: not implemented yet".into()))
}
