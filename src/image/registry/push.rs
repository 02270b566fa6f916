//! The upload half of the distribution API (`husk push`): HEAD a blob to
//! skip what the registry has, POST + PUT `?digest=` for one that it lacks
//! (a monolithic upload), PUT the manifest last. Same auth as pulls (a
//! 401 challenge is answered once per request; tokens ask for `pull,push`),
//! same transport rules (plain HTTP only to loopback or
//! `--insecure-registry` hosts). Uploads are not redirected by registries
//! and are not followed; a failed upload is not retried (run push again:
//! what arrived is skipped by the HEAD).

use super::auth::Challenge;
use super::{Client, RegistryError, error_detail, header, resolve_location};
use crate::image::digest::Digest;
use std::path::Path;
use ureq::http::{Response, Uri};

/// A request body that can be sent again after an auth challenge.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    Empty,
    Bytes(&'a [u8]),
    File(&'a Path),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Head,
    Post,
    Put,
}

impl Client {
    /// A client whose tokens also allow pushing to its repository.
    pub fn for_push(mut self) -> Client {
        self.actions = "pull,push";
        self
    }

    /// One request under the auth rules of `get` (no redirects); the
    /// response whatever its status, except 401/403, which are errors.
    fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        payload: Payload<'_>,
    ) -> Result<Response<ureq::Body>, RegistryError> {
        let uri: Uri =
            url.parse().map_err(|e| RegistryError::Http { url: super::truncate(url, 200), why: format!("{e}") })?;
        self.check_scheme(&uri)?;
        let mut challenged = false;
        loop {
            let auth = self.auth.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let http = |e: ureq::Error| RegistryError::Http { url: url.to_string(), why: e.to_string() };
            let resp = match method {
                Method::Head => {
                    let mut r = self.agent.head(url);
                    for (k, v) in headers {
                        r = r.header(*k, *v);
                    }
                    if let Some(a) = &auth {
                        r = r.header("Authorization", a);
                    }
                    r.call().map_err(http)?
                }
                Method::Post | Method::Put => {
                    let mut r = if method == Method::Post { self.agent.post(url) } else { self.agent.put(url) };
                    for (k, v) in headers {
                        r = r.header(*k, *v);
                    }
                    if let Some(a) = &auth {
                        r = r.header("Authorization", a);
                    }
                    match payload {
                        Payload::Empty => r.send_empty().map_err(http)?,
                        Payload::Bytes(b) => r.send(b).map_err(http)?,
                        Payload::File(p) => {
                            let f = std::fs::File::open(p).map_err(|e| RegistryError::Refused {
                                what: p.display().to_string(),
                                why: e.to_string(),
                            })?;
                            r.send(f).map_err(http)?
                        }
                    }
                }
            };
            let status = resp.status().as_u16();
            if status == 401 && !challenged {
                let ch = header(resp.headers(), "www-authenticate").ok_or_else(|| RegistryError::Auth {
                    registry: self.host.clone(),
                    why: "401 without a WWW-Authenticate challenge".into(),
                })?;
                let ch = Challenge::parse(&ch)
                    .map_err(|e| RegistryError::Auth { registry: self.host.clone(), why: e.to_string() })?;
                let value = self.answer(&ch)?;
                *self.auth.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
                challenged = true;
                continue;
            }
            if status == 401 || status == 403 {
                let hint = match &self.cred {
                    Some(c) => format!("the credentials of {} may not push here", c.origin),
                    None => format!("no credentials for {}; run `husk login {}`", self.host, self.host),
                };
                return Err(RegistryError::Auth { registry: self.host.clone(), why: format!("{status}: {hint}") });
            }
            return Ok(resp);
        }
    }

    /// Whether the repository has the blob (HEAD: 200 yes, 404 no).
    pub fn has_blob(&self, digest: &Digest) -> Result<bool, RegistryError> {
        let url = self.url(&format!("blobs/{digest}"));
        let resp = self.send(Method::Head, &url, &[], Payload::Empty)?;
        match resp.status().as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            status => Err(RegistryError::Status { url, status, detail: String::new() }),
        }
    }

    /// Uploads one blob in a single PUT; the registry checks its digest.
    pub fn upload_blob(&self, digest: &Digest, payload: Payload<'_>) -> Result<(), RegistryError> {
        let start = self.url("blobs/uploads/");
        let resp = self.send(Method::Post, &start, &[], Payload::Empty)?;
        let status = resp.status().as_u16();
        if status != 202 {
            let detail = error_detail(resp);
            return Err(RegistryError::Status { url: start, status, detail });
        }
        let loc = header(resp.headers(), "location").ok_or_else(|| RegistryError::Refused {
            what: start.clone(),
            why: "202 without a Location for the upload".into(),
        })?;
        let base: Uri = start.parse().map_err(|e| RegistryError::Http { url: start.clone(), why: format!("{e}") })?;
        let mut url = resolve_location(&base, &loc);
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(&format!("digest=sha256%3A{}", digest.hex()));
        let resp = self.send(Method::Put, &url, &[("Content-Type", "application/octet-stream")], payload)?;
        match resp.status().as_u16() {
            201 | 204 => Ok(()),
            status => {
                let detail = error_detail(resp);
                Err(RegistryError::Status { url: self.url(&format!("blobs/{digest}")), status, detail })
            }
        }
    }

    /// Puts the manifest under `reference` (a tag, or its digest); the
    /// registry's `Docker-Content-Digest`, when it sends one, must be the
    /// digest of the bytes sent.
    pub fn put_manifest(&self, reference: &str, media_type: &str, bytes: &[u8]) -> Result<Digest, RegistryError> {
        let url = self.url(&format!("manifests/{reference}"));
        let resp = self.send(Method::Put, &url, &[("Content-Type", media_type)], Payload::Bytes(bytes))?;
        let status = resp.status().as_u16();
        if status != 201 && status != 200 {
            let detail = error_detail(resp);
            return Err(RegistryError::Status { url, status, detail });
        }
        let ours = Digest::of(bytes);
        if let Some(theirs) = header(resp.headers(), "docker-content-digest")
            && theirs != ours.to_string()
        {
            return Err(RegistryError::Refused {
                what: url,
                why: format!("the registry stored the manifest as {theirs}, not {ours}"),
            });
        }
        Ok(ours)
    }
}
