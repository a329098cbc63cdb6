//! The benchmark clients: one thread per connection (named `bench-client`), each driving a
//! `moonbridge-client` connection, so the library's cost is part of what is measured.
//!
//! Verification needs no parsing: the client knows the exact bytes the backend must answer to each round
//! trip (the echo of what it sent, or the tick's template answer), in order, and compares the stream with
//! them byte for byte.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use moonbridge_client::{Connection, Options, Stats};
use moonbridge_protocol::crypto::{Cfb8Decryptor, Cfb8Encryptor};
use moonbridge_protocol::packets::{EncryptionRequest, EncryptionResponse, Packet};
use moonbridge_protocol::FrameDecoder;

use crate::backend::{login_answer, Profile};
use crate::workload::{self, Spec};

/// What one client does.
#[derive(Clone, Debug)]
pub struct ClientSpec {
    pub url: String,
    pub options: Options,
    pub profile: Profile,
    pub warmup: usize,
    pub messages: usize,
    pub window: usize,
    pub payload: usize,
    pub burst: usize,
    /// End the tick after each round trip's packets (one message per tick).
    pub end_ticks: bool,
    pub name: String,
    /// Do the online-mode login (Encryption Request/Response), then encrypt the stream with AES-CFB8.
    pub online: bool,
    /// A light player: in the timed phase, one round trip per `pace` (a game tick) for as long as any busy
    /// client is still in its timed phase, instead of `messages` round trips as fast as the window allows.
    pub pace: Option<Duration>,
    /// Server transfers before the warmup (`--mode post-transfer`): each asks the backend to switch the player
    /// to the other of the proxy's two backends and waits for the proxy's world reset.
    pub switches: usize,
}

/// The proxy's two backend names in `--mode post-transfer` (both the same fake backend).
pub const SWITCH_TARGETS: [&str; 2] = ["bench", "bench2"];

/// What one client measured.
#[derive(Debug, Default)]
pub struct ClientResult {
    pub login_burst: Duration,
    /// Round-trip latencies of the timed phase.
    pub latencies: Vec<Duration>,
    /// Frames both ways in the timed phase.
    pub frames: u64,
    /// Round trips completed in the timed phase.
    pub round_trips: u64,
    /// Library counters over the timed phase.
    pub stats: Stats,
    /// Each switch, from the request to the last byte of the world reset.
    pub switch_times: Vec<Duration>,
    pub error: Option<String>,
}

/// The barrier points of a phase: after warmup, start of the timed phase, end of the timed phase.
pub struct Sync {
    /// Held during a login: connections log in one at a time, so the login burst time is one player's, not
    /// four players' competing for two cores.
    pub login_turn: std::sync::Mutex<()>,
    /// Every client has logged in (before its warmup): the login window ends.
    pub logged: Barrier,
    pub warmed: Barrier,
    pub go: Barrier,
    pub done: Barrier,
    pub release: Barrier,
    /// Clients that have finished their login (or failed before it): the harness can connect clients one at
    /// a time, in an order it chooses.
    pub logged_in: AtomicUsize,
    /// Busy clients still in (or before) their timed phase; light clients stop when it reaches 0.
    pub busy_left: AtomicUsize,
}

impl Sync {
    pub fn new(clients: usize, busy: usize) -> Arc<Self> {
        Arc::new(Self {
            logged_in: AtomicUsize::new(0),
            busy_left: AtomicUsize::new(busy),
            login_turn: std::sync::Mutex::new(()),
            logged: Barrier::new(clients + 1),
            warmed: Barrier::new(clients + 1),
            go: Barrier::new(clients + 1),
            done: Barrier::new(clients + 1),
            release: Barrier::new(clients + 1),
        })
    }
}

/// One round trip in flight: when it was sent and the bytes it must bring back.
struct InFlight {
    sent: Instant,
    expected: Vec<u8>,
    frames: u64,
}

/// The connection as the game sees it: plaintext in and out, AES-CFB8 on the wire once online mode is on
/// (what a 1.7.10 client does after Encryption Response).
struct Link<'a> {
    conn: &'a Connection,
    cipher: Option<(Cfb8Encryptor, Cfb8Decryptor)>,
    scratch: Vec<u8>,
}

impl Link<'_> {
    fn send(&mut self, data: &[u8]) -> anyhow::Result<()> {
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

    fn end_tick(&self) -> anyhow::Result<()> {
        Ok(self.conn.end_tick()?)
    }

    /// Receives (and decrypts) at most `buf.len()` bytes; 0 when nothing came within `within`.
    fn recv(&mut self, buf: &mut [u8], within: Duration) -> anyhow::Result<usize> {
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

struct Driver<'a> {
    link: Link<'a>,
    spec: &'a ClientSpec,
    templates: &'a [Vec<Spec>],
    buf: Vec<u8>,
    /// Bytes received but not yet matched.
    pending: Vec<u8>,
    in_flight: VecDeque<InFlight>,
    next_seq: u32,
}

impl Driver<'_> {
    /// Sends round trip `seq` and records what it must bring back.
    fn send(&mut self) -> anyhow::Result<()> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let (expected, frames) = match self.spec.profile {
            Profile::Modded => {
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
    fn run(&mut self, count: usize, mut record: Option<&mut ClientResult>) -> anyhow::Result<()> {
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
    fn run_paced(&mut self, tick: Duration, busy_left: &AtomicUsize, record: &mut ClientResult) -> anyhow::Result<()> {
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
struct BusyDone<'a>(&'a AtomicUsize);

impl Drop for BusyDone<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn subtract(a: Stats, b: Stats) -> Stats {
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
    }
}

/// Sends the Handshake and Login Start (and, online, answers the Encryption Request), then receives the
/// backend's login answer: returns the link (encrypting once online) and the bytes received, at least the
/// answer's length (the caller compares them).
fn log_in<'a>(conn: &'a Connection, spec: &ClientSpec, buf: &mut [u8]) -> anyhow::Result<(Link<'a>, Vec<u8>)> {
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

/// What one soak player (`session-bench soak --instances`) did.
#[derive(Debug, Default)]
pub struct SoakPlayer {
    /// Round trips whose every byte was checked.
    pub round_trips: u64,
    /// Carriage v2 resumes the client library made.
    pub resumes: u64,
}

/// A soak player: logs in (counted in `logged_in`), then plays one round trip per `spec.pace` (the game's
/// tick), checking every byte it receives, until `playing` is 0; then closes.
///
/// # Errors
/// The first failure: the connection lost for good, an answer that is late (30 s) or differs by one byte.
pub fn run_soak_player(
    spec: &ClientSpec,
    templates: &[Vec<Spec>],
    logged_in: &AtomicUsize,
    playing: &AtomicUsize,
) -> anyhow::Result<SoakPlayer> {
    let conn = Connection::connect(&spec.url, spec.options.clone())?;
    let mut buf = vec![0u8; 1 << 20];
    let (link, got) = log_in(&conn, spec, &mut buf)?;
    if got != login_answer(&spec.name) {
        anyhow::bail!("login answer differs from what the backend sent");
    }
    logged_in.fetch_add(1, Ordering::Relaxed);
    let mut driver = Driver {
        link,
        spec,
        templates,
        buf,
        pending: Vec::with_capacity(256 * 1024),
        in_flight: VecDeque::new(),
        next_seq: 0,
    };
    let mut record = ClientResult::default();
    driver.run_paced(spec.pace.unwrap_or(Duration::from_millis(50)), playing, &mut record)?;
    let resumes = conn.stats().resumes;
    conn.close();
    Ok(SoakPlayer { round_trips: record.round_trips, resumes })
}

/// Runs one client through login, warmup and the timed phase, meeting the harness at each barrier (also
/// after a failure, so the harness never waits forever).
pub fn run_client(spec: ClientSpec, templates: Arc<Vec<Vec<Spec>>>, sync: Arc<Sync>) -> ClientResult {
    let mut result = ClientResult::default();
    let mut stage = 0;
    let mut announced = false;
    let outcome = (|| -> anyhow::Result<()> {
        let busy = spec.pace.is_none().then(|| BusyDone(&sync.busy_left));
        let conn = Connection::connect(&spec.url, spec.options.clone())?;
        let turn = sync.login_turn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let started = Instant::now();
        let mut buf = vec![0u8; 1 << 20];
        let (mut link, got) = log_in(&conn, &spec, &mut buf)?;
        result.login_burst = started.elapsed();
        drop(turn);
        sync.logged_in.fetch_add(1, Ordering::Relaxed);
        announced = true;
        sync.logged.wait();
        stage = 1;
        if got != login_answer(&spec.name) {
            anyhow::bail!("login answer differs from what the backend sent");
        }
        if spec.switches > 0 {
            let expected = crate::backend::switch_answer();
            for k in 0..spec.switches {
                let to = if k % 2 == 0 { SWITCH_TARGETS[1] } else { SWITCH_TARGETS[0] };
                let asked = Instant::now();
                link.send(&crate::backend::switch_request(to))?;
                link.end_tick()?;
                let mut seen = Vec::with_capacity(expected.len());
                while seen.len() < expected.len() {
                    let n = link.recv(&mut buf, Duration::from_secs(30))?;
                    if n == 0 {
                        anyhow::bail!("switch {k} to {to} not done within 30 s");
                    }
                    seen.extend_from_slice(buf.get(..n).unwrap_or_default());
                }
                if seen != expected {
                    anyhow::bail!("switch {k} to {to}: the client saw other bytes than the world reset");
                }
                result.switch_times.push(asked.elapsed());
            }
        }
        let mut driver = Driver {
            link,
            spec: &spec,
            templates: &templates,
            buf: vec![0u8; 256 * 1024],
            pending: Vec::with_capacity(256 * 1024),
            in_flight: VecDeque::new(),
            next_seq: 0,
        };
        driver.run(spec.warmup, None)?;
        stage = 2;
        sync.warmed.wait();
        sync.go.wait();
        stage = 3;
        let before = conn.stats();
        match spec.pace {
            None => driver.run(spec.messages, Some(&mut result))?,
            Some(tick) => driver.run_paced(tick, &sync.busy_left, &mut result)?,
        }
        result.stats = subtract(conn.stats(), before);
        drop(busy);
        stage = 4;
        sync.done.wait();
        sync.release.wait();
        stage = 5;
        conn.close();
        Ok(())
    })();
    if let Err(e) = outcome {
        result.error = Some(format!("{}: {e:#}", spec.name));
    }
    if !announced {
        sync.logged_in.fetch_add(1, Ordering::Relaxed);
    }
    // Meet the barriers not reached yet, so the harness and the other clients go on.
    if stage < 1 {
        sync.logged.wait();
    }
    if stage < 2 {
        sync.warmed.wait();
    }
    if stage < 3 {
        sync.go.wait();
    }
    if stage < 4 {
        sync.done.wait();
    }
    if stage < 5 {
        sync.release.wait();
    }
    result
}
