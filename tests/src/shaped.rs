//! A shaped path built by the test itself ([`ShapedPath`]): a network namespace for the player's side, joined to
//! the test's own namespace by a user-space link between two TUN devices that carries each direction at a fixed
//! rate with a fixed delay (this kernel has no `netem`). Like a last mile: players in the namespace reach
//! `10.77.x.2` (the test's side) through the link; everything the test runs (the proxy, HAProxy, nginx, the
//! backend) listens on the test's side.
//!
//! Each direction is a drop-tail queue of at most `queue_bytes` in front of a serializer at `rate` bits per
//! second, then `delay` of propagation. Needs `CAP_NET_ADMIN` (the tests run as root); everything it creates
//! (the namespace, both devices) is removed on drop.
//!
//! The one place of the test bed with foreign calls (`setns`, the TUN `ioctl`, `poll`): no library of the
//! dependency tree wraps them, and each is a single call with its arguments checked here.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `TUNSETIFF` (linux/if_tun.h).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct ifreq` as `TUNSETIFF` reads it: the name and the flags, padded to its 40 bytes.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    pad: [u8; 22],
}

/// The link's shape, each direction alike.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Bits per second.
    pub rate: u64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// The bottleneck queue's size, bytes (drop-tail).
    pub queue_bytes: usize,
}

/// The namespace, the two devices and the two forwarding threads.
pub struct ShapedPath {
    ns: String,
    outside: String,
    /// The player's side's address (inside the namespace).
    pub inside_ip: Ipv4Addr,
    /// The test's side's address: what players in the namespace connect to.
    pub outside_ip: Ipv4Addr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Runs `f` on a new thread that has entered the network namespace `ns` (threads it starts are in it too).
pub fn in_namespace<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).expect("the namespace exists");
        // SAFETY: a valid descriptor of a network namespace; affects only this thread.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    })
}

/// Opens a TUN device named `name` in the calling thread's namespace.
fn open_tun(name: &str) -> Result<File, String> {
    let path = c"/dev/net/tun";
    // SAFETY: a NUL-terminated path; the descriptor is owned by the File below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!("open /dev/net/tun: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd) };
    let mut req = IfReq { name: [0; 16], flags: IFF_TUN | IFF_NO_PI, pad: [0; 22] };
    let n = name.len().min(15);
    req.name[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: TUNSETIFF reads a struct ifreq of this layout.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &req) };
    if r < 0 {
        return Err(format!("TUNSETIFF {name}: {}", std::io::Error::last_os_error()));
    }
    Ok(file)
}

/// Waits up to `ms` for `file` to be readable.
fn readable(file: &File, ms: i32) -> bool {
    let mut p = libc::pollfd { fd: file.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// One direction: packets from `from` go to `to` shaped.
fn forward(mut from: File, mut to: File, shape: Shape, stop: Arc<AtomicBool>) {
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut queued = 0usize;
    // When the serializer is free again.
    let mut free = Instant::now();
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        while queue.front().is_some_and(|(at, _)| *at <= now) {
            let (_, p) = queue.pop_front().unwrap();
            queued -= p.len();
            let _ = to.write(&p);
        }
        let wait =
            queue.front().map_or(20, |(at, _)| at.saturating_duration_since(now).as_micros().div_ceil(1000) as i32);
        if !readable(&from, wait.min(20)) {
            continue;
        }
        let Ok(n) = from.read(&mut buf) else { continue };
        if n == 0 || queued + n > shape.queue_bytes {
            continue; // drop-tail
        }
        let now = Instant::now();
        let start = free.max(now);
        free = start + Duration::from_nanos(n as u64 * 8 * 1_000_000_000 / shape.rate);
        queued += n;
        queue.push_back((free + shape.delay, buf[..n].to_vec()));
    }
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl ShapedPath {
    /// Builds the namespace and the link. `Err` when this machine cannot (no `CAP_NET_ADMIN`, no TUN).
    pub fn new(shape: Shape) -> Result<Self, String> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = (std::process::id() % 10_000) * 10 + n % 10;
        let ns = format!("mb-shaped-{tag}");
        let (inside, outside) = (format!("mbti{tag}"), format!("mbto{tag}"));
        let subnet = 64 + (tag % 128) as u8;
        let inside_ip = Ipv4Addr::new(10, 77, subnet, 1);
        let outside_ip = Ipv4Addr::new(10, 77, subnet, 2);
        ip(&["netns", "add", &ns])?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut path =
            Self { ns: ns.clone(), outside: outside.clone(), inside_ip, outside_ip, stop, threads: Vec::new() };
        let name = inside.clone();
        let inner = in_namespace(&ns, move || open_tun(&name)).join().map_err(|_| "tun thread".to_string())??;
        let outer = open_tun(&outside)?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns, "addr", "add", &inside_ip.to_string(), "peer", &outside_ip.to_string(), "dev", &inside])?;
        ip(&["-n", &ns, "link", "set", &inside, "up"])?;
        ip(&["addr", "add", &outside_ip.to_string(), "peer", &inside_ip.to_string(), "dev", &outside])?;
        ip(&["link", "set", &outside, "up"])?;
        let (i2, o2) = (inner.try_clone().map_err(|e| e.to_string())?, outer.try_clone().map_err(|e| e.to_string())?);
        let (s1, s2) = (Arc::clone(&path.stop), Arc::clone(&path.stop));
        path.threads.push(std::thread::spawn(move || forward(inner, outer, shape, s1)));
        path.threads.push(std::thread::spawn(move || forward(o2, i2, shape, s2)));
        Ok(path)
    }

    /// The namespace's name (for [`in_namespace`]).
    pub fn namespace(&self) -> &str {
        &self.ns
    }
}

impl Drop for ShapedPath {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = ip(&["link", "del", &self.outside]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}
