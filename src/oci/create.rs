//! create and run.

use super::state::Store;
use super::{CreateArgs, OciError, RunArgs};

pub fn create(_store: &Store, _a: &CreateArgs) -> Result<(), OciError> {
    Err(OciError::Refused("create: not implemented yet".into()))
}

pub fn run(_store: &Store, _a: &RunArgs) -> Result<i32, OciError> {
    Err(OciError::Refused("run: not implemented yet".into()))
}
