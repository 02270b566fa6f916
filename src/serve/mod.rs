//! `husk serve`'s transport: HTTP/1.1 framing (`http`), where it listens
//! (`listen`) and the accept loop (`server`). What the requests mean (the
//! API of docs/api.md) is `cmd::serve`'s; nothing here knows sandboxes.
//! None of it runs unless `husk serve` does.

pub mod client;
pub mod http;
pub mod listen;
pub mod server;
