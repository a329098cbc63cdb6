//! `moonbridge ctl`'s side of the admin API: one HTTP/1.1 request per call over plain TCP (the operations
//! listener has no TLS: reach it over a private network, an SSH tunnel or `kubectl port-forward`), and the
//! human-readable tables of players and of their delivery figures.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::row::{DeliveryRow, PlayerRow};
use crate::players::Reach;

/// How long one call may take, connect to close: 10 seconds (the operations listener answers within 4).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest answer read, in bytes: 64 MiB (a network of 100,000 players lists in about 25 MiB).
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Why a call failed. [`CtlError::exit_code`] is what `moonbridge ctl` exits with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CtlError {
    /// `--url` is not `http://HOST:PORT`.
    #[error("--url {0}: expected http://HOST:PORT (the [metrics] listener)")]
    Url(String),
    /// The token file cannot be read or is empty.
    #[error("--token-file {path}: {why}")]
    Token {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        why: String,
    },
    /// The listener could not be reached or did not answer in time.
    #[error("{addr}: {source}")]
    Unreachable {
        /// Where.
        addr: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The answer is not an HTTP response with a JSON body.
    #[error("{0}: not an admin API answer (is this the [metrics] listener, with admin_token_file set?)")]
    Malformed(String),
    /// `401`: no token or a wrong one.
    #[error("refused: the token is not this instance's admin token (metrics.admin_token_file)")]
    Unauthorized,
    /// `503`: every serving slot of the listener is taken; try again.
    #[error("{0}: busy (503): every serving slot of the listener is taken; try again")]
    Busy(String),
    /// Another status: the API's error text.
    #[error("{status}: {text}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The API's `error`.
        text: String,
    },
}

impl CtlError {
    /// The exit code `moonbridge ctl` uses: 1 when the API refused the request or found nothing, 3 for a wrong
    /// or missing token, 4 when the API could not be reached, was busy or did not answer as one (2 is a usage
    /// error; 1 also for an action that did not reach everyone it was for).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Refused { .. } => 1,
            Self::Unauthorized => 3,
            Self::Url(_) | Self::Token { .. } | Self::Unreachable { .. } | Self::Malformed(_) | Self::Busy(_) => 4,
        }
    }
}

/// A client of one instance's admin API.
#[derive(Debug)]
pub struct Client {
    addr: String,
    token: String,
}

impl Client {
    /// A client of the API at `url` (`http://HOST:PORT`, a trailing `/` allowed) with the token in
    /// `token_file` (surrounding whitespace trimmed).
    ///
    /// # Errors
    /// [`CtlError::Url`], [`CtlError::Token`].
    pub fn new(url: &str, token_file: &std::path::Path) -> Result<Self, CtlError> {
        let addr = url.strip_prefix("http://").map(|a| a.trim_end_matches('/')).filter(|a| !a.contains('/'));
        let addr = addr.filter(|a| a.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()));
        let addr = addr.ok_or_else(|| CtlError::Url(url.to_string()))?.to_string();
        let token_error = |why: String| CtlError::Token { path: token_file.into(), why };
        let token = std::fs::read_to_string(token_file).map_err(|e| token_error(e.to_string()))?;
        let token = token.trim().to_string();
        if token.is_empty() {
            return Err(token_error("empty".into()));
        }
        Ok(Self { addr, token })
    }

    /// `GET /admin/players`, filtered by backend and instance.
    ///
    /// # Errors
    /// [`CtlError`].
    pub fn players(&self, backend: Option<&str>, instance: Option<&str>) -> Result<Vec<PlayerRow>, CtlError> {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if let Some(b) = backend {
            query.append_pair("backend", b);
        }
        if let Some(i) = instance {
            query.append_pair("instance", i);
        }
        let query = query.finish();
        let path = if query.is_empty() { "/admin/players".to_string() } else { format!("/admin/players?{query}") };
        #[derive(serde::Deserialize)]
        struct Players {
            players: Vec<PlayerRow>,
        }
        let answer: Players = self.call("GET", &path, None)?;
        Ok(answer.players)
    }

    /// `GET /admin/players/<name>`.
    ///
    /// # Errors
    /// [`CtlError`]; [`CtlError::Refused`] with 404 when no instance holds the player.
    pub fn find(&self, name: &str) -> Result<PlayerRow, CtlError> {
        let name = percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
        self.call("GET", &format!("/admin/players/{name}"), None)
    }

    /// `GET /admin/delivery`: the delivery figures of the players on this instance.
    ///
    /// # Errors
    /// [`CtlError`].
    pub fn delivery(&self) -> Result<Vec<DeliveryRow>, CtlError> {
        #[derive(serde::Deserialize)]
        struct Rows {
            players: Vec<DeliveryRow>,
        }
        let answer: Rows = self.call("GET", "/admin/delivery", None)?;
        Ok(answer.players)
    }

    /// `POST /admin/<verb>` with `body` (`kick`, `send`, `message`): what it came to.
    ///
    /// # Errors
    /// [`CtlError`].
    pub fn act(&self, verb: &str, body: &serde_json::Value) -> Result<Reach, CtlError> {
        self.call("POST", &format!("/admin/{verb}"), Some(body))
    }

    /// `POST /admin/drain`: `exit` false keeps the process up afterwards.
    ///
    /// # Errors
    /// [`CtlError`].
    pub fn drain(&self, exit: bool) -> Result<serde_json::Value, CtlError> {
        self.call("POST", "/admin/drain", Some(&serde_json::json!({ "exit": exit })))
    }

    /// One request and its JSON answer, within [`CALL_TIMEOUT`].
    fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<T, CtlError> {
        let deadline = Instant::now() + CALL_TIMEOUT;
        let unreachable = |source| CtlError::Unreachable { addr: self.addr.clone(), source };
        let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time");
        let left = || deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()).ok_or_else(timed_out);
        let addrs: Vec<SocketAddr> = self.addr.to_socket_addrs().map_err(unreachable)?.collect();
        let mut last = timed_out();
        let mut stream = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, left().map_err(unreachable)?) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let mut stream = stream.ok_or_else(|| unreachable(last))?;
        let body = body.map(serde_json::Value::to_string).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            self.token,
            body.len()
        );
        stream.set_write_timeout(Some(left().map_err(unreachable)?)).map_err(unreachable)?;
        stream.write_all(request.as_bytes()).map_err(unreachable)?;
        let mut got = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            stream.set_read_timeout(Some(left().map_err(unreachable)?)).map_err(unreachable)?;
            match stream.read(&mut chunk).map_err(unreachable)? {
                0 => break,
                n => got.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            }
            if got.len() > MAX_ANSWER_BYTES {
                return Err(CtlError::Malformed(format!("{}: an answer over {MAX_ANSWER_BYTES} bytes", self.addr)));
            }
        }
        let malformed = || CtlError::Malformed(self.addr.clone());
        let (status, json) = split_answer(&got).ok_or_else(malformed)?;
        #[derive(serde::Deserialize)]
        struct ApiError {
            error: String,
        }
        match status {
            200..=299 => serde_json::from_slice(json).map_err(|_| malformed()),
            401 => Err(CtlError::Unauthorized),
            503 => Err(CtlError::Busy(self.addr.clone())),
            // Only the admin API's own error answers are refusals; anything else is not the admin API.
            status => match serde_json::from_slice::<ApiError>(json) {
                Ok(e) => Err(CtlError::Refused { status, text: e.error }),
                Err(_) => Err(malformed()),
            },
        }
    }
}

/// The status and body of a whole `Connection: close` answer; `None` when it is not one, or its body is not as
/// long as its `Content-Length` says (cut short).
fn split_answer(got: &[u8]) -> Option<(u16, &[u8])> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(head)) = response.parse(got) else { return None };
    let body = got.get(head..)?;
    let length = response.headers.iter().find(|h| h.name.eq_ignore_ascii_case("content-length"));
    if let Some(h) = length {
        let n: usize = std::str::from_utf8(h.value).ok()?.trim().parse().ok()?;
        if n != body.len() {
            return None;
        }
    }
    Some((response.code?, body))
}

/// `rows` as a table for people: one line per player, columns aligned, a count at the end.
pub fn table(rows: &[PlayerRow]) -> String {
    let dash = |o: Option<String>| o.map_or_else(|| "-".into(), |s| printable(&s));
    let lines = rows.iter().map(|r| {
        [
            printable(&r.name),
            dash(r.instance.clone()),
            printable(&r.backend),
            dash(r.address.map(|a| a.to_string())),
            dash(r.transport.map(|t| t.to_string())),
            dash(r.carriage.map(|c| c.to_string())),
            dash(r.session_seconds.map(age)),
        ]
    });
    grid(["NAME", "INSTANCE", "BACKEND", "ADDRESS", "TRANSPORT", "CARRIAGE", "SESSION"], lines)
}

/// The players' delivery figures as `moonbridge ctl delivery` prints them: one line per player (a lane's
/// queued bytes and the age of its oldest; `-` for what is not measured: the window's figures of a player
/// that is not paced), then the count.
pub fn delivery_table(rows: &[DeliveryRow]) -> String {
    let queue = |b: u64, age_ms: f64| if b == 0 { "0 B".to_string() } else { format!("{} {}", size(b), ms(age_ms)) };
    let dash = |o: Option<String>| o.unwrap_or_else(|| "-".into());
    let lines = rows.iter().map(|r| {
        [
            printable(&r.name),
            r.transport.to_string(),
            r.carriage.to_string(),
            (if r.lanes { "on" } else { "off" }).to_string(),
            queue(r.urgent_bytes, r.urgent_age_ms),
            queue(r.bulk_bytes, r.bulk_age_ms),
            ms(r.urgent_max_wait_ms),
            dash(r.rate_bytes_per_second.map(|b| format!("{}/s", size(b)))),
            dash(r.rtt_ms.map(ms)),
            dash(r.window_bytes.map(size)),
            dash(r.in_flight_bytes.map(size)),
        ]
    });
    let head = [
        "NAME",
        "TRANSPORT",
        "CARRIAGE",
        "LANES",
        "URGENT",
        "BULK",
        "URGENT-MAX",
        "RATE",
        "RTT",
        "WINDOW",
        "IN-FLIGHT",
    ];
    grid(head, lines)
}

/// Aligned columns under `head`, then `N player(s)`.
fn grid<const N: usize>(head: [&str; N], lines: impl Iterator<Item = [String; N]>) -> String {
    let lines: Vec<[String; N]> = lines.collect();
    let head = head.map(String::from);
    let mut widths = head.clone().map(|h| h.len());
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in std::iter::once(&head).chain(&lines) {
        let cells: Vec<String> = line.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out.push_str(&format!("{} player(s)\n", lines.len()));
    out
}

/// A byte count as people read it: `812 B`, `16.0 KiB`, `3.4 MiB`.
fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / f64::from(1 << 20)),
    }
}

/// Milliseconds as people read them: `41 ms`, `8.1 s`.
fn ms(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// `text` with control characters escaped (`\u{1b}`): what another instance wrote to Redis cannot drive the
/// operator's terminal.
fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// A session age as people read it: `42s`, `7m05s`, `3h02m`.
fn age(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{Carriage, Transport};

    #[test]
    fn urls_answers_and_tables() {
        let dir = std::env::temp_dir().join(format!("moonbridge-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "t\n").unwrap();
        assert!(Client::new("http://127.0.0.1:9477/", &token).is_ok());
        for bad in ["127.0.0.1:9477", "https://127.0.0.1:9477", "http://127.0.0.1", "http://h:1/x"] {
            assert!(matches!(Client::new(bad, &token), Err(CtlError::Url(_))), "{bad}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        let answer = b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(split_answer(answer), Some((404, b"{}".as_slice())));
        assert_eq!(split_answer(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(split_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}"), None, "cut short");
        let row = PlayerRow {
            name: "Alex".into(),
            uuid: "0".repeat(32),
            instance: Some("00000000000000aa".into()),
            backend: "lobby".into(),
            address: Some(([203, 0, 113, 7], 50000).into()),
            transport: Some(Transport::Wss),
            carriage: Some(Carriage::V2Zstd),
            session_seconds: Some(3723),
        };
        let t = table(&[row]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "NAME  INSTANCE          BACKEND  ADDRESS            TRANSPORT  CARRIAGE  SESSION");
        assert_eq!(lines[1], "Alex  00000000000000aa  lobby    203.0.113.7:50000  wss        v2.zstd   1h02m");
        assert_eq!(lines[2], "1 player(s)");
        assert_eq!((age(5), age(425)), ("5s".to_string(), "7m05s".to_string()));
        let paced = DeliveryRow {
            name: "Alex".into(),
            transport: Transport::Wss,
            carriage: Carriage::V2,
            lanes: true,
            urgent_bytes: 0,
            urgent_age_ms: 0.0,
            bulk_bytes: 3_565_158,
            bulk_age_ms: 8_130.0,
            urgent_max_wait_ms: 131.4,
            rate_bytes_per_second: Some(491_520),
            rtt_ms: Some(41.2),
            window_bytes: Some(94_208),
            in_flight_bytes: Some(61_440),
        };
        let unpaced = DeliveryRow {
            name: "Steve".into(),
            transport: Transport::Tcp,
            carriage: Carriage::None,
            lanes: false,
            rate_bytes_per_second: None,
            rtt_ms: None,
            window_bytes: None,
            in_flight_bytes: None,
            urgent_max_wait_ms: 0.0,
            bulk_bytes: 0,
            ..paced.clone()
        };
        let t = delivery_table(&[paced, unpaced]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "NAME   TRANSPORT  CARRIAGE  LANES  URGENT  BULK           URGENT-MAX  RATE         RTT    WINDOW    IN-FLIGHT"
        );
        assert_eq!(
            lines[1],
            "Alex   wss        v2        on     0 B     3.4 MiB 8.1 s  131 ms      480.0 KiB/s  41 ms  92.0 KiB  60.0 KiB"
        );
        assert_eq!(
            lines[2],
            "Steve  tcp        none      off    0 B     0 B            0 ms        -            -      -         -"
        );
        assert_eq!(lines[3], "2 player(s)");
        assert_eq!(printable("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
    }
}
