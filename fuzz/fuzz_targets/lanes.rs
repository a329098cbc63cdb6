//! Feeds a clientbound stream, split anywhere, to the lanes (`moonbridge_protocol::lanes`) the way the relay
//! does: batches queued (`push`), sent at once past an empty queue (`pass`, or `resync` from a frame scanner
//! that saw every byte), and taken in pieces of any size. Nothing may panic, no byte may appear that the
//! backend did not send, and when the stream parses, every whole frame comes out once: the frames of urgent
//! packets in their order, all others in theirs, and none before a Join Game or Respawn it followed.
//!
//! Input: one byte of settings (the frame limit, how many operation bytes follow), the operation bytes (each
//! one: what to do, and how many bytes), then the stream.
#![no_main]

use std::time::Instant;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::lanes::{Lane, LaneQueue, Sorter, BARRIER_PACKETS};
use moonbridge_protocol::{FrameScanner, VarInt, VarIntDecodeError};

/// The channel named urgent (a Plugin Message on it is urgent).
const CHANNELS: [&str; 1] = ["MyChatMod"];

fuzz_target!(|data: &[u8]| {
    let Some((&settings, rest)) = data.split_first() else { return };
    let max_frame_len = if settings & 0x0f == 0 { 2_097_151 } else { usize::from(settings & 0x0f) * 512 };
    let (ops, stream) = rest.split_at(rest.len().min(usize::from(settings >> 4) * 4));
    let now = Instant::now();
    let mut q = LaneQueue::new(Sorter::with_channels(&CHANNELS), max_frame_len);
    let mut scanner = FrameScanner::with_limit(max_frame_len);
    let mut scanning = true;
    let mut out = BytesMut::new();
    let mut at = 0usize;
    let mut turn = 0usize;
    let mut progress = 0usize;
    while at < stream.len() {
        let op = ops.get(turn % ops.len().max(1)).copied().unwrap_or(0);
        turn += 1;
        let n = usize::from(op >> 2) * 37 + 1;
        let take_stream = |at: &mut usize| {
            let part = &stream[*at..stream.len().min(*at + n)];
            *at += part.len();
            part
        };
        match op & 3 {
            // A take, unless a whole round of the operations took nothing in (then it pushes).
            1 if turn <= progress + ops.len() => {
                q.take(n, &mut out, now);
                assert!(out.len() <= at, "more bytes out than in");
                continue;
            }
            2 if q.is_empty() => {
                let part = take_stream(&mut at);
                scanning &= scanner.scan(part).is_ok();
                q.pass(part, now);
                out.extend_from_slice(part);
            }
            3 if q.is_empty() => {
                // What the relay does after a batch sent at once: resync from its own scanner.
                let part = take_stream(&mut at);
                scanning &= scanner.scan(part).is_ok();
                if scanning {
                    q.resync(scanner.remaining().unwrap_or(0), scanner.prefix());
                } else {
                    q.lose();
                }
                out.extend_from_slice(part);
            }
            _ => {
                let part = take_stream(&mut at);
                scanning &= scanner.scan(part).is_ok();
                q.push(part, now);
            }
        }
        progress = turn;
        assert!(out.len() <= at, "more bytes out than in");
    }
    let (rest, _) = q.take_all(now);
    out.extend_from_slice(&rest);
    assert!(out.len() <= stream.len());

    // The frames in, in order (stopping where the stream stops parsing), and the frames out.
    let Some(frames_in) = frames(stream, max_frame_len) else { return };
    if !q.sorting() || !scanning {
        return;
    }
    let Some(frames_out) = frames(&out, max_frame_len) else { panic!("the frames out do not parse") };
    let sorter = Sorter::with_channels(&CHANNELS);
    let urgent = |f: &[u8]| sorter.lane(f, f.len()) == Some(Lane::Urgent);
    let (urgent_in, bulk_in): (Vec<_>, Vec<_>) = frames_in.iter().enumerate().partition(|(_, f)| urgent(f));
    // Each class comes out in its order (a prefix of it: a frame waiting for its rest holds back its lane).
    let (mut u, mut b) = (0usize, 0usize);
    let mut order = Vec::with_capacity(frames_out.len());
    for f in &frames_out {
        let (list, k) = if urgent(f) { (&urgent_in, &mut u) } else { (&bulk_in, &mut b) };
        let Some((i, expected)) = list.get(*k) else { panic!("a frame out that did not come in") };
        assert_eq!(f, *expected, "a frame out of its class's order");
        order.push(*i);
        *k += 1;
    }
    if q.queued(Lane::Urgent) + q.queued(Lane::Bulk) == 0 {
        assert_eq!(frames_out.len(), frames_in.len(), "a whole frame did not come out");
    }
    // Nothing comes out before a Join Game or Respawn that came in before it.
    let barriers: Vec<usize> = frames_in
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(VarInt::decode_partial(f), Ok((id, _)) if BARRIER_PACKETS.contains(&id)))
        .map(|(i, _)| i)
        .collect();
    let mut seen = 0usize;
    for i in order {
        assert!(seen >= barriers.partition_point(|&b| b < i), "frame {i} overtook a Join Game or Respawn");
        if barriers.get(seen) == Some(&i) {
            seen += 1;
        }
    }
});

/// The bodies (packet id and fields) of the whole frames of `bytes` as the lanes read them (a frame not whole
/// at the end left out); `None` when the bytes stop parsing.
fn frames(mut bytes: &[u8], max_frame_len: usize) -> Option<Vec<&[u8]>> {
    let mut list = Vec::new();
    loop {
        let (len, n) = match VarInt::decode_partial(bytes) {
            Ok(v) => v,
            Err(VarIntDecodeError::Incomplete) => return Some(list),
            Err(_) => return None,
        };
        let len = usize::try_from(len).ok().filter(|&l| l > 0 && l <= max_frame_len)?;
        let Some(body) = bytes.get(n..n + len) else { return Some(list) };
        list.push(body);
        bytes = &bytes[n + len..];
    }
}
