//! `husk serve`'s request reader (src/serve/http.rs): never panics, never
//! returns more body than `max_body`, and agrees with an oracle on requests
//! built from the input: a request serialized with a Content-Length (or
//! chunked) body parses back to the same method, path and body.

use husk::serve::http::{Framing, HttpError, Limits, parse_request};

const LIMITS: Limits = Limits { max_head: 2048, max_headers: 16, max_body: 4096 };

pub fn request(data: &[u8]) {
    // Any bytes as a request.
    check(data);
    // The input as the body of a well-formed request, both framings.
    let (split, rest) = match data.split_first() {
        Some((b, rest)) => (*b as usize, rest),
        None => (0, data),
    };
    let body = &rest[..rest.len().min(LIMITS.max_body as usize)];
    let mut with_length =
        format!("PUT /v1/x?path=%2Fa HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    with_length.extend_from_slice(body);
    let r = parse_request(&with_length, &LIMITS).expect("a well-formed request parses");
    assert_eq!((r.head.method.as_str(), r.head.path.as_str(), r.head.query("path")), ("PUT", "/v1/x", Some("/a")));
    assert_eq!(r.body, body);
    let mut chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let step = split.max(1);
    for c in body.chunks(step) {
        chunked.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        chunked.extend_from_slice(c);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = parse_request(&chunked, &LIMITS).expect("a well-formed chunked request parses");
    assert_eq!(r.body, body);
    // The input as a head: whatever it says, the bounds hold.
    let mut head = b"POST / HTTP/1.1\r\n".to_vec();
    head.extend_from_slice(rest);
    head.extend_from_slice(b"\r\n\r\n");
    check(&head);
}

fn check(bytes: &[u8]) {
    match parse_request(bytes, &LIMITS) {
        Ok(r) => {
            assert!(r.body.len() as u64 <= LIMITS.max_body, "body over the limit");
            assert!(r.head.headers.len() <= LIMITS.max_headers);
            if let Framing::Length(n) = r.head.framing {
                assert_eq!(r.body.len() as u64, n, "body length differs from Content-Length");
            }
            let lengths = r.head.headers.iter().filter(|(n, _)| n == "content-length").count();
            let te = r.head.headers.iter().any(|(n, _)| n == "transfer-encoding");
            assert!(!(lengths > 0 && te), "a request with both framings was accepted");
        }
        Err(HttpError::Io(e)) => panic!("reading from memory failed: {e}"),
        Err(e) => {
            let _ = e.status();
        }
    }
}
