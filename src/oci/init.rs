//! The container init (child side).
