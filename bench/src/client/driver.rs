//! A benchmark client's connection at work: the link as the game sees it (AES-CFB8 once online mode is on),
//! the online-mode login, the login itself, and the driver that runs round trips (as fast as the window
//! allows, or one per game tick) and checks each answer byte for byte.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use moonbridge_client::{Connection, Stats};
use moonbridge_protocol::crypto::{Cfb8Decryptor, Cfb8Encryptor};
use moonbridge_protocol::packets::{EncryptionRequest, EncryptionResponse, Packet};
use moonbridge_protocol::FrameDecoder;

use super::spec::{ClientResult, ClientSpec};
use crate::backend::{login_answer, Profile};
use crate::workload::{self, Spec};

/// One round trip in flight: when it was sent and the bytes it must bring back.
struct InFlight {
    sent: Instant,
    expected: Vec<u8>,
    frames: u64,
}

/// The connection as the game sees it: plaintext in and out, AES-CFB8 on the wire once online mode is on
/// (what a 1.7.10 client does after Encryption Response).
pub struct Link<'a> {
    conn: &'a Connection,
    cipher: Option<(Cfb8Encryptor, Cfb8Decryptor)>,
    scratch: Vec<u8>,
}

impl Link<'_> {
    pub fn send(&mut self, data: &[u8]) -> anyhow::Result<()> {
        match &mut self.cipher {
            None => self.conn.send(data)?,
            Some((enc, _)) => {
                self.scratch.clear();
                self.scratch.extend_from_slice(data);
                enc.apply(&mut self.scratch);
                self.conn.send(&self.scratch)?;
            }
        }
        Ok(())
    }

    pub fn end_tick(&self) -> anyhow::Result<()> {
        Ok(self.conn.end_tick()?)
    }

    /// Receives (and decrypts) at most `buf.len()` bytes; 0 when nothing came within `within`.
    pub fn recv(&mut self, buf: &mut [u8], within: Duration) -> anyhow::Result<usize> {
        let n = self.conn.recv(buf, Some(within))?;
        if let Some((_, dec)) = &mut self.cipher {
            dec.apply(buf.get_mut(..n).unwrap_or_default());
        }
        Ok(n)
    }
}

/// The client half of the online-mode login: reads the proxy's Encryption Request, answers it with a fresh
/// shared secret (RSA PKCS#1 v1.5 with the proxy's key) and returns the cipher pair for the stream. The bench's
/// session server is a stand-in that vouches for everyone, so no `join` call is made.
fn online_login(link: &mut Link<'_>, buf: &mut [u8]) -> anyhow::Result<(Cfb8Encryptor, Cfb8Decryptor)> {
    use rsa::pkcs8::DecodePublicKey;
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    let request: EncryptionRequest = loop {
        if let Some(f) = dec.try_next_frame()? {
            break f.decode()?;
        }
        let n = link.recv(buf, Duration::from_secs(30))?;
        if n == 0 {
            anyhow::bail!("no Encryption Request within 30 s (is the proxy in online mode?)");
        }
        dec.queue_slice(buf.get(..n).unwrap_or_default());
    };
    let key = rsa::RsaPublicKey::from_public_key_der(&request.public_key)?;
    let mut secret = [0u8; 16];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut secret);
    let mut rng = rand_core::OsRng;
    let response = EncryptionResponse {
        shared_secret: key.encrypt(&mut rng, rsa::Pkcs1v15Encrypt, &secret)?,
        verify_token: key.encrypt(&mut rng, rsa::Pkcs1v15Encrypt, &request.verify_token)?,
    };
    link.send(&response.to_frame_bytes()?)?;
    link.end_tick()?;
    Ok((Cfb8Encryptor::new(&secret), Cfb8Decryptor::new(&secret)))
}

/// Runs round trips on a logged-in link and checks every answer byte for byte.
pub struct Driver<'a> {
    link: Link<'a>,
    spec: &'a ClientSpec,
    templates: &'a [Vec<Spec>],
    buf: Vec<u8>,
    /// Bytes received but not yet matched.
    pending: Vec<u8>,
    in_flight: VecDeque<InFlight>,
    next_seq: u32,
}

impl<'a> Driver<'a> {
    /// A driver for `link`, receiving into `buf`.
    pub fn new(link: Link<'a>, spec: &'a ClientSpec, templates: &'a [Vec<Spec>], buf: Vec<u8>) -> Self {
        Self {
            link,
            spec,
            templates,
            buf,
            pending: Vec::with_capacity(256 * 1024),
            in_flight: VecDeque::new(),
            next_seq: 0,
        }
    }
}

impl Driver<'_> {
    /// Sends round trip `seq` and records what it must bring back.
    fn send(&mut self) -> anyhow::Result<()> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let (expected, frames) = match self.spec.profile {
            Profile::Modded | Profile::Checked | Profile::Capacity(_) => {
                for p in workload::encode_client_tick(seq) {
                    self.link.send(&p)?;
                }
                let mut answer = Vec::with_capacity(16 * 1024);
                let n = workload::encode_tick_answer(self.templates, seq, &mut answer);
                (answer, 3 + n as u64)
            }
            Profile::Echo => {
                let mut burst = Vec::with_capacity(self.spec.burst * (self.spec.payload + 8));
                for i in 0..self.spec.burst {
                    workload::encode_echo_frame(seq, i, self.spec.payload, &mut burst);
                }
                // One client write per burst: with coalescing off the library sends each send as one message.
                self.link.send(&burst)?;
                (burst, 2 * self.spec.burst as u64)
            }
        };
        if self.spec.end_ticks {
            self.link.end_tick()?;
        }
        self.in_flight.push_back(InFlight { sent: Instant::now(), expected, frames });
        Ok(())
    }

    /// Receives until at least one round trip completes; returns the completed ones.
    fn complete(&mut self, out: &mut Vec<(Duration, u64)>) -> anyhow::Result<()> {
        loop {
            while let Some(front) = self.in_flight.front() {
                if self.pending.len() < front.expected.len() {
                    break;
                }
                let n = front.expected.len();
                if self.pending.get(..n) != Some(&front.expected[..]) {
                    anyhow::bail!("answer to round trip {} differs from what was expected", self.next_seq);
                }
                self.pending.drain(..n);
                if let Some(done) = self.in_flight.pop_front() {
                    out.push((done.sent.elapsed(), done.frames));
                }
            }
            if !out.is_empty() {
                return Ok(());
            }
            let n = self.link.recv(&mut self.buf, Duration::from_secs(30))?;
            if n == 0 {
                anyhow::bail!("no answer within 30 s");
            }
            self.pending.extend_from_slice(self.buf.get(..n).unwrap_or_default());
        }
    }

    /// Runs `count` round trips with up to `window` in flight; returns latencies and frames.
    pub fn run(&mut self, count: usize, mut record: Option<&mut ClientResult>) -> anyhow::Result<()> {
        let mut sent = 0;
        let mut done = 0;
        let mut completed = Vec::new();
        while done < count {
            while sent < count && self.in_flight.len() < self.spec.window {
                self.send()?;
                sent += 1;
            }
            completed.clear();
            self.complete(&mut completed)?;
            done += completed.len();
            if let Some(r) = record.as_deref_mut() {
                for (latency, frames) in &completed {
                    r.latencies.push(*latency);
                    r.frames += frames;
                    r.round_trips += 1;
                }
            }
        }
        Ok(())
    }
}

impl Driver<'_> {
    /// A light player's timed phase: one round trip per `tick` until no busy client is left.
    pub fn run_paced(
        &mut self,
        tick: Duration,
        busy_left: &AtomicUsize,
        record: &mut ClientResult,
    ) -> anyhow::Result<()> {
        let mut next = Instant::now();
        let mut completed = Vec::new();
        while busy_left.load(Ordering::Relaxed) > 0 {
            self.send()?;
            completed.clear();
            self.complete(&mut completed)?;
            for (latency, frames) in &completed {
                record.latencies.push(*latency);
                record.frames += frames;
                record.round_trips += 1;
            }
            // Pacing a load generator, not synchronising a test: the next tick starts on the game's clock.
            next += tick;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        Ok(())
    }
}

/// Counts a busy client out of `busy_left` when dropped (after its timed phase, or when it fails), so light
/// clients never wait for one that is gone.
pub struct BusyDone<'a>(pub &'a AtomicUsize);

impl Drop for BusyDone<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The library counters of `a` less those of `b` (the last resume as in `a`).
pub fn subtract(a: Stats, b: Stats) -> Stats {
    Stats {
        frames_out: a.frames_out - b.frames_out,
        frames_in: a.frames_in - b.frames_in,
        messages_out: a.messages_out - b.messages_out,
        messages_in: a.messages_in - b.messages_in,
        bytes_out: a.bytes_out - b.bytes_out,
        bytes_in: a.bytes_in - b.bytes_in,
        ticks: a.ticks - b.ticks,
        delay_flushes: a.delay_flushes - b.delay_flushes,
        size_flushes: a.size_flushes - b.size_flushes,
        pings_sent: a.pings_sent - b.pings_sent,
        resumes: a.resumes - b.resumes,
        last_resume_us: a.last_resume_us,
        move_retries: a.move_retries - b.move_retries,
        sent_on: a.sent_on - b.sent_on,
    }
}

/// Sends the Handshake and Login Start (and, online, answers the Encryption Request), then receives the
/// backend's login answer: returns the link (encrypting once online) and the bytes received, at least the
/// answer's length (the caller compares them).
pub fn log_in<'a>(conn: &'a Connection, spec: &ClientSpec, buf: &mut [u8]) -> anyhow::Result<(Link<'a>, Vec<u8>)> {
    let want = login_answer(&spec.name).len();
    let mut link = Link { conn, cipher: None, scratch: Vec::new() };
    link.send(&workload::login_hello("mc.example.com\0FML\0", &spec.name)?)?;
    link.end_tick()?;
    if spec.online {
        link.cipher = Some(online_login(&mut link, buf)?);
    }
    let mut got = Vec::with_capacity(want);
    while got.len() < want {
        let n = link.recv(buf, Duration::from_secs(30))?;
        if n == 0 {
            anyhow::bail!("login burst not received within 30 s");
        }
        got.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
    Ok((link, got))
}
