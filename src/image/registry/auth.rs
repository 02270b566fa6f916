//! The `WWW-Authenticate` challenge (RFC 7235 auth-params, as registries
//! send them) and the token service's answer.

/// What a registry's 401 asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    /// Get a token from `realm` (the distribution token flow).
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// A challenge or token answer husk cannot use (the texts are cut: they
/// come from the registry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("a Bearer challenge without a realm")]
    NoRealm,
    #[error("unsupported authentication scheme {0:?} (husk speaks Basic and Bearer)")]
    Scheme(String),
    #[error("malformed challenge parameter {0:?}")]
    Parameter(String),
    #[error("unterminated quoted string in the challenge")]
    Unterminated,
    #[error("the token service's answer is not the expected JSON: {0}")]
    TokenJson(String),
    #[error("the token service's answer holds no token")]
    NoToken,
    #[error("the token service's token holds control characters")]
    TokenControl,
}

impl Challenge {
    pub fn parse(header: &str) -> Result<Challenge, AuthError> {
        let header = header.trim();
        let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
        let params = params(rest)?;
        let get = |k: &str| params.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.clone());
        match scheme.to_ascii_lowercase().as_str() {
            "basic" => Ok(Challenge::Basic),
            "bearer" => {
                let realm = get("realm").ok_or(AuthError::NoRealm)?;
                Ok(Challenge::Bearer { realm, service: get("service"), scope: get("scope") })
            }
            _ => Err(AuthError::Scheme(super::truncate(scheme, 40))),
        }
    }
}

/// `k=v, k="quoted, with \"escapes\""` pairs.
fn params(s: &str) -> Result<Vec<(String, String)>, AuthError> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i] == b' ' || b[i] == b',') {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let start = i;
        while i < b.len() && b[i] != b'=' {
            i += 1;
        }
        let key = s[start..i].trim().to_string();
        if i >= b.len() {
            return Err(AuthError::Parameter(super::truncate(&key, 40)));
        }
        i += 1;
        let mut val = String::new();
        if i < b.len() && b[i] == b'"' {
            i += 1;
            let mut closed = false;
            let mut bytes = Vec::new();
            while i < b.len() {
                match b[i] {
                    b'\\' if i + 1 < b.len() => {
                        bytes.push(b[i + 1]);
                        i += 2;
                    }
                    b'"' => {
                        closed = true;
                        i += 1;
                        break;
                    }
                    c => {
                        bytes.push(c);
                        i += 1;
                    }
                }
            }
            if !closed {
                return Err(AuthError::Unterminated);
            }
            val = String::from_utf8_lossy(&bytes).into_owned();
        } else {
            let vs = i;
            while i < b.len() && b[i] != b',' {
                i += 1;
            }
            val.push_str(s[vs..i].trim());
        }
        out.push((key, val));
    }
    Ok(out)
}

/// The token of a token service's JSON answer (`token`, or OAuth2's
/// `access_token`).
pub fn token_from(body: &[u8]) -> Result<String, AuthError> {
    #[derive(serde::Deserialize)]
    struct Answer {
        token: Option<String>,
        access_token: Option<String>,
    }
    let a: Answer = serde_json::from_slice(body).map_err(|e| AuthError::TokenJson(e.to_string()))?;
    let t = a.token.filter(|t| !t.is_empty()).or(a.access_token).filter(|t| !t.is_empty());
    let t = t.ok_or(AuthError::NoToken)?;
    // It goes into a header: no control characters.
    if t.bytes().any(|b| b.is_ascii_control()) {
        return Err(AuthError::TokenControl);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenge_with_quoted_commas_is_parsed() {
        let c = Challenge::parse(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/python:pull,push""#,
        )
        .unwrap();
        assert_eq!(
            c,
            Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/python:pull,push".into()),
            }
        );
        assert_eq!(Challenge::parse(r#"Basic realm="Registry Realm""#).unwrap(), Challenge::Basic);
        assert!(Challenge::parse("Bearer service=x").is_err());
        assert!(Challenge::parse("Negotiate").is_err());
        assert!(Challenge::parse(r#"Bearer realm="unterminated"#).is_err());
    }

    #[test]
    fn token_answers_are_read_and_checked() {
        assert_eq!(token_from(br#"{"token":"abc","expires_in":60}"#).unwrap(), "abc");
        assert_eq!(token_from(br#"{"access_token":"xyz"}"#).unwrap(), "xyz");
        assert!(token_from(br#"{"token":""}"#).is_err());
        assert!(token_from(b"{\"token\":\"a\\r\\nX-Evil: 1\"}").is_err());
        assert!(token_from(b"<html>").is_err());
    }
}
