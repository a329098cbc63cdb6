//! The one HTTP/1.1 request-head reader (RFC 9112 §2–3, through `httparse`), sans-IO: the WebSocket upgrade
//! ([`crate::listen::upgrade`]) and the operations listener ([`crate::ops`]) both parse with it, under the same
//! limits.

/// Largest request head (request line and headers) accepted, in bytes: 8,192.
pub(crate) const MAX_REQUEST_HEAD: usize = 8192;
/// Most request headers accepted: 64.
pub(crate) const MAX_HEADERS: usize = 64;

/// Why a request head was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HeadError {
    /// Over [`MAX_REQUEST_HEAD`] bytes without an end, or over [`MAX_HEADERS`] headers.
    #[error("request head over {MAX_REQUEST_HEAD} bytes or {MAX_HEADERS} headers")]
    TooLarge,
    /// Not HTTP/1.x (httparse's reason).
    #[error("malformed HTTP request: {0}")]
    Malformed(String),
}

/// Parses the request head at the start of `buf` (the bytes read so far): `Ok(None)` while it is incomplete
/// and within [`MAX_REQUEST_HEAD`], else `Ok(Some(read(request, head_len)))` once it is whole, where
/// `head_len` is where the bytes after the head (a WebSocket stream's first frames) start.
///
/// # Errors
/// [`HeadError`] for a head that is too large or malformed.
pub(crate) fn parse_head<T>(
    buf: &[u8],
    read: impl FnOnce(&httparse::Request<'_, '_>, usize) -> T,
) -> Result<Option<T>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(head_len)) => Ok(Some(read(&req, head_len))),
        Ok(httparse::Status::Partial) if buf.len() <= MAX_REQUEST_HEAD => Ok(None),
        Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
        Err(e) => Err(HeadError::Malformed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_whole_partial_too_large_and_malformed() {
        let path = |buf: &[u8]| parse_head(buf, |r, n| (r.method.map(str::to_owned), r.path.map(str::to_owned), n));
        let get = b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\nrest";
        assert_eq!(path(get), Ok(Some((Some("GET".into()), Some("/metrics?x=1".into()), get.len() - 4))));
        assert_eq!(path(b"GET /metrics HTTP/1.1\r\nHost"), Ok(None));
        // Incomplete at the limit is still waiting; one byte over it is refused.
        let mut long = b"GET / HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_REQUEST_HEAD, b'a');
        assert_eq!(path(&long), Ok(None));
        long.push(b'a');
        assert_eq!(path(&long), Err(HeadError::TooLarge));
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(path(&many), Err(HeadError::TooLarge));
        assert!(matches!(path(b"\x16\x03\x01\x02\x00"), Err(HeadError::Malformed(_))));
    }
}
