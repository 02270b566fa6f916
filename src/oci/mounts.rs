//! The container's mounts (child side).
