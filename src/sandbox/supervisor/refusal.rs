//! Why the supervisor refused a connection's request or failed at it:
//! typed here, turned into the reply's `error` text only when it is sent
//! (the wire carries text: `proto::Reply.error`).

use crate::cgroup::CgroupError;
use crate::cgroup::freeze::FreezeError;

/// A claim, freeze or warm call the supervisor did not grant.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    #[error("sandbox {id} is not an unclaimed member of pool {pool:?}")]
    NotPoolMember { id: String, pool: String },
    #[error("sandbox {0} has run execs: not fresh, not handed out")]
    NotFresh(String),
    #[error("sandbox {0} is paused: not handed out")]
    PausedNotHandedOut(String),
    #[error("a claim's ttl must be longer than 0")]
    ZeroTtl,
    #[error("sandbox {0} has no cgroup, so it cannot be frozen")]
    NoCgroup(String),
    #[error("a freeze must last longer than 0 ms")]
    ZeroFreeze,
    #[error("freezing sandbox {id}: {source}")]
    Freeze { id: String, source: FreezeError },
    #[error("the sandbox was created without --warm or --session")]
    NotWarm,
    /// The interpreter is down: why, as recorded when it went (the
    /// composed text of an earlier failure, kept across requests).
    #[error("{0}")]
    WarmDown(String),
    #[error("it is not running")]
    WarmNotRunning,
}

/// Why a zygote's spare could not be moved into its leaf.
#[derive(Debug, thiserror::Error)]
pub(super) enum PlaceError {
    #[error("the spare is gone")]
    SpareGone,
    #[error("opening its leaf: {0}")]
    Leaf(#[source] CgroupError),
    #[error("a pipe for the move: {0}")]
    Pipe(#[source] nix::errno::Errno),
    #[error("a thread for the move: {0}")]
    Thread(#[source] std::io::Error),
    #[error("moving it: {0}")]
    Adopt(#[source] CgroupError),
    #[error("the move's thread panicked")]
    Panicked,
}
