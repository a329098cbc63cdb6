//! A 1.7.10 player session driven through the MoonBridge client library, against the node backend
//! (`peers/backend.js`): handshake, Login Start, Login Success, Join Game, the plugin-message burst checked
//! byte for byte, and a chat round trip. Keep Alives are answered.

use std::time::{Duration, Instant};

use moonbridge_client::Connection;
use moonbridge_protocol::codec::{put_string, Reader};
use moonbridge_protocol::packets::{KeepAlive, LoginSuccess, Packet, PluginMessage};
use moonbridge_protocol::{Frame, FrameDecoder, MAX_FRAME_LEN};

/// Byte `i` of burst message `n`, as `peers/common.js` builds it.
pub fn burst_payload(n: usize, size: usize) -> Vec<u8> {
    (0..size).map(|i| ((n * 131 + i * 7 + (i >> 8)) & 0xff) as u8).collect()
}

/// What a session saw.
#[derive(Debug, Default)]
pub struct SessionReport {
    pub joined: bool,
    pub burst_messages: usize,
    pub chat_echo: Option<String>,
    /// `recv` calls that returned data.
    pub recv_calls: usize,
    /// Time from the first burst byte to the last.
    pub burst_time: Duration,
}

/// Reads frames from a client connection.
pub struct FrameReader<'a> {
    conn: &'a Connection,
    dec: FrameDecoder,
    buf: Vec<u8>,
    pub recv_calls: usize,
}

impl<'a> FrameReader<'a> {
    pub fn new(conn: &'a Connection) -> Self {
        Self { conn, dec: FrameDecoder::new(MAX_FRAME_LEN), buf: vec![0; 1 << 20], recv_calls: 0 }
    }

    /// The next frame, or a panic after `within`.
    pub fn next(&mut self, within: Duration) -> Frame {
        let deadline = Instant::now() + within;
        loop {
            if let Some(f) = self.dec.try_next_frame().expect("valid frames") {
                return f;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no frame within {within:?}");
            match self.conn.recv(&mut self.buf, Some(left)) {
                Ok(0) => {}
                Ok(n) => {
                    self.recv_calls += 1;
                    self.dec.queue_slice(&self.buf[..n]);
                }
                Err(e) => panic!("connection ended: {e}"),
            }
        }
    }
}

fn frame(id: i32, fields: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    moonbridge_protocol::frame::encode_frame(&mut out, id, fields).unwrap();
    out
}

/// Handshake + Login Start for `name`, Forge marker optional, as one tick.
pub fn send_login(conn: &Connection, name: &str, forge: bool) {
    let host = if forge { "mc.example.com\0FML\0" } else { "mc.example.com" };
    conn.send(&crate::login_handshake(host)).unwrap();
    conn.send(&crate::login_start(name)).unwrap();
    conn.end_tick().unwrap();
}

/// A whole session against the node backend.
pub fn play(conn: &Connection, name: &str, forge: bool, burst_count: usize, burst_size: usize) -> SessionReport {
    let step = Duration::from_secs(30);
    let mut report = SessionReport::default();
    let mut r = FrameReader::new(conn);
    send_login(conn, name, forge);
    let f = r.next(step);
    let success: LoginSuccess = f.decode().expect("Login Success");
    assert_eq!(success.name, name);
    let mut burst_started = None;
    loop {
        let f = r.next(step);
        match f.id {
            0x00 => {
                let ka: KeepAlive = f.decode().unwrap();
                conn.send(&ka.to_frame_bytes().unwrap()).unwrap();
                conn.end_tick().unwrap();
            }
            0x01 => report.joined = true,
            0x02 if report.burst_messages == burst_count => {
                let mut rd = Reader::new(&f.body);
                let json = rd.string(32767, "message").unwrap();
                let v: serde_json::Value = serde_json::from_str(json).unwrap();
                report.chat_echo = v["text"].as_str().map(str::to_owned);
                break;
            }
            0x3f => {
                let p = PluginMessage::decode_fields(&mut Reader::new(&f.body)).unwrap();
                if p.channel != crate::BURST_CHANNEL {
                    continue;
                }
                burst_started.get_or_insert_with(Instant::now);
                assert_eq!(
                    p.data,
                    burst_payload(report.burst_messages, burst_size),
                    "burst message {}",
                    report.burst_messages
                );
                report.burst_messages += 1;
                if report.burst_messages == burst_count {
                    report.burst_time = burst_started.map(|t| t.elapsed()).unwrap_or_default();
                    let mut fields = Vec::new();
                    put_string(&mut fields, &format!("hello from {name}"), 100, "message").unwrap();
                    conn.send(&frame(0x01, &fields)).unwrap();
                    conn.end_tick().unwrap();
                }
            }
            _ => {}
        }
    }
    report.recv_calls = r.recv_calls;
    report
}
