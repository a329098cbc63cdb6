//! Byte-exact vectors for the lanes: frames sorted, overtaking only between whole frames, order kept within
//! a lane, heads split anywhere.

use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::*;

/// A frame: length, packet id, `fill` bytes of body after the id.
fn frame(id: u8, fill: usize) -> Vec<u8> {
    let mut body = vec![id];
    body.extend((0..fill).map(|i| (i % 251) as u8));
    let mut out = Vec::new();
    VarInt(body.len() as i32).encode(&mut out);
    out.extend_from_slice(&body);
    out
}

/// A Plugin Message S3F on `channel` with `data`.
fn plugin(channel: &str, data: &[u8]) -> Vec<u8> {
    let mut body = vec![0x3f, channel.len() as u8];
    body.extend_from_slice(channel.as_bytes());
    body.extend_from_slice(&(data.len() as u16).to_be_bytes());
    body.extend_from_slice(data);
    let mut out = Vec::new();
    VarInt(body.len() as i32).encode(&mut out);
    out.extend_from_slice(&body);
    out
}

fn drain(q: &mut LaneQueue, max: usize, now: Instant) -> Vec<u8> {
    let mut out = BytesMut::new();
    loop {
        let before = out.len();
        q.take(max, &mut out, now);
        if out.len() == before {
            return out.to_vec();
        }
    }
}

#[test]
fn urgent_frames_overtake_bulk_not_sent_and_each_lane_keeps_its_order() {
    let t = Instant::now();
    let chunk1 = frame(0x21, 20_000);
    let chat1 = frame(0x02, 10);
    let chunk2 = frame(0x21, 30_000);
    let keep_alive = frame(0x00, 4);
    let chat2 = frame(0x02, 12);
    let stream = [chunk1.clone(), chat1.clone(), chunk2.clone(), keep_alive.clone(), chat2.clone()].concat();
    let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
    q.push(&stream, t);
    assert_eq!(q.queued(Lane::Urgent), chat1.len() + keep_alive.len() + chat2.len());
    assert_eq!(q.queued(Lane::Bulk), chunk1.len() + chunk2.len());
    let out = drain(&mut q, 4096, t + Duration::from_millis(7));
    assert_eq!(out, [chat1, keep_alive, chat2, chunk1, chunk2].concat());
    assert!(q.is_empty());
    assert!(q.at_boundary());
}

#[test]
fn a_frame_once_started_is_finished_before_an_urgent_frame() {
    let t = Instant::now();
    let chunk = frame(0x21, 5_000);
    let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
    q.push(&chunk, t);
    let mut out = BytesMut::new();
    let taken = q.take(1_000, &mut out, t);
    assert_eq!(taken, Taken { bytes: 1_000, urgent_wait: None });
    assert!(!q.at_boundary());
    let chat = frame(0x02, 3);
    q.push(&chat, t);
    let rest = drain(&mut q, 1_000, t);
    assert_eq!([out.to_vec(), rest].concat(), [chunk, chat].concat());
}

#[test]
fn a_frame_split_across_batches_continues_in_its_lane_and_waits_for_its_rest() {
    let t = Instant::now();
    let chunk = frame(0x21, 40_000);
    let chat = frame(0x02, 5);
    let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
    q.push(chunk.get(..10_000).unwrap(), t);
    let mut out = BytesMut::new();
    q.take(usize::MAX, &mut out, t);
    assert_eq!(out.len(), 10_000);
    assert!(q.stalled(), "the frame under way waits for its rest");
    q.push(&[chunk.get(10_000..).unwrap(), &chat].concat(), t);
    assert!(!q.stalled());
    let rest = drain(&mut q, usize::MAX, t);
    assert_eq!([out.to_vec(), rest].concat(), [chunk, chat].concat());
}

#[test]
fn heads_split_at_every_byte_sort_the_same() {
    let t = Instant::now();
    let sorter = Sorter::with_channels(&["MB|Chat"]);
    let frames = [
        frame(0x21, 300),
        frame(0x02, 2),
        plugin("MB|Chat", b"hi"),
        plugin("FML|HS", b"x"),
        frame(0x40, 200),
        frame(0x26, 1),
    ];
    let stream = frames.concat();
    let expected = [
        frames[1].clone(),
        frames[2].clone(),
        frames[4].clone(),
        frames[0].clone(),
        frames[3].clone(),
        frames[5].clone(),
    ]
    .concat();
    for cut in 0..stream.len() {
        let mut q = LaneQueue::new(sorter.clone(), 2_097_151);
        q.push(stream.get(..cut).unwrap(), t);
        q.push(stream.get(cut..).unwrap(), t);
        assert_eq!(drain(&mut q, usize::MAX, t), expected, "cut at {cut}");
    }
}

#[test]
fn a_named_channel_is_urgent_and_others_are_bulk() {
    let sorter = Sorter::with_channels(&["MB|Chat", "a-name-longer-than-twenty"]);
    let body = |f: Vec<u8>| f.get(1..).unwrap().to_vec();
    let b = body(plugin("MB|Chat", b"x"));
    assert_eq!(sorter.lane(&b, b.len()), Some(Lane::Urgent));
    let b = body(plugin("MB|Cha", b"x"));
    assert_eq!(sorter.lane(&b, b.len()), Some(Lane::Bulk));
    assert_eq!(sorter.lane(&[0x3f, 7, b'M'], 30), None, "not enough of the channel yet");
    assert_eq!(Sorter::default().lane(&[0x3f], 30), Some(Lane::Bulk), "no channels named: bulk at once");
    for id in URGENT_PACKETS {
        assert_eq!(sorter.lane(&[id as u8], 1), Some(Lane::Urgent), "{id:#x}");
    }
    for id in [0x01u8, 0x07, 0x21, 0x22, 0x23, 0x26, 0x2d, 0x2e, 0x3b, 0x3e] {
        assert_eq!(sorter.lane(&[id], 1), Some(Lane::Bulk), "{id:#x}");
    }
}

#[test]
fn a_stream_that_stops_parsing_goes_on_in_order_in_the_bulk_lane() {
    let t = Instant::now();
    let chat = frame(0x02, 1);
    let chunk = frame(0x21, 50);
    // A length past the limit, then bytes that might look like frames.
    let bad = [0xff, 0xff, 0x7f, 0x02, 0x00];
    let stream = [chunk.clone(), chat.clone(), bad.to_vec(), chat.clone()].concat();
    let mut q = LaneQueue::new(Sorter::default(), 1_000);
    q.push(&stream, t);
    assert!(!q.sorting());
    let out = drain(&mut q, usize::MAX, t);
    assert_eq!(out, [chat.clone(), chunk, bad.to_vec(), chat].concat());
}

#[test]
fn the_urgent_wait_and_the_lane_ages_are_measured_from_the_push() {
    let t = Instant::now();
    let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
    q.push(&frame(0x21, 100), t);
    q.push(&frame(0x00, 4), t + Duration::from_millis(30));
    assert_eq!(q.age(Lane::Bulk, t + Duration::from_millis(50)), Some(Duration::from_millis(50)));
    assert_eq!(q.age(Lane::Urgent, t + Duration::from_millis(50)), Some(Duration::from_millis(20)));
    let mut out = BytesMut::new();
    let taken = q.take(usize::MAX, &mut out, t + Duration::from_millis(100));
    assert_eq!(taken.urgent_wait, Some(Duration::from_millis(70)));
    assert_eq!(q.age(Lane::Urgent, t), None);
}

#[test]
fn pieces_keep_consecutive_small_frames_together_up_to_the_piece_size() {
    let t = Instant::now();
    let block = frame(0x23, 9);
    let stream: Vec<u8> = std::iter::repeat_n(block.clone(), 10_000).flatten().collect();
    let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
    q.push(&stream, t);
    let pieces = q.bulk.pieces.len();
    assert!(pieces <= stream.len() / PIECE_BYTES + 1, "{pieces} pieces");
    assert_eq!(drain(&mut q, 1_500, t), stream);
}

#[test]
fn a_stream_no_longer_followed_keeps_the_order() {
    let t = Instant::now();
    let stream = [frame(0x21, 10), frame(0x02, 1)].concat();
    let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
    q.lose();
    assert!(!q.sorting());
    q.push(&stream, t);
    assert_eq!(q.queued(Lane::Urgent), 0);
    assert_eq!(drain(&mut q, 7, t), stream);
}

#[test]
fn bytes_sent_at_once_are_followed_and_a_frame_they_end_inside_goes_on_first() {
    let t = Instant::now();
    let chunk = frame(0x21, 3_000);
    let chat = frame(0x02, 2);
    let stream = [chunk.clone(), chat.clone(), chunk.clone(), chat.clone()].concat();
    // Every cut of the stream into "sent at once" and "queued" gives the stream's order for the frame cut
    // through, and lets whole urgent frames after it overtake.
    for cut in 0..stream.len() {
        let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
        q.pass(stream.get(..cut).unwrap(), t);
        q.push(stream.get(cut..).unwrap(), t);
        let out = [stream.get(..cut).unwrap().to_vec(), drain(&mut q, 512, t)].concat();
        assert_eq!(out.len(), stream.len(), "cut {cut}");
        // The same frames arrive; each lane in order.
        let mut check = LaneQueue::new(Sorter::default(), 2_097_151);
        check.push(&out, t);
        assert_eq!(check.queued(Lane::Urgent), 2 * chat.len(), "cut {cut}");
        assert!(q.is_empty() && q.at_boundary(), "cut {cut}");
        let second_chunk_at = chunk.len() + chat.len();
        if cut <= second_chunk_at && cut > 0 {
            // The second chat overtakes the second chunk when the chunk was not started.
            let first_chat = out.windows(chat.len()).position(|w| w == chat.as_slice()).unwrap();
            assert!(first_chat <= chunk.len().max(cut), "cut {cut}");
        }
    }
}

#[test]
fn a_head_sent_at_once_keeps_the_queue_stalled_until_its_lane_is_known() {
    let t = Instant::now();
    let chat = frame(0x02, 2);
    let chunk = frame(0x21, 100);
    let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
    q.pass(chunk.get(..1).unwrap(), t);
    assert!(!q.at_boundary());
    assert!(q.stalled());
    q.push(&[chunk.get(1..).unwrap(), &chat].concat(), t);
    let out = drain(&mut q, usize::MAX, t);
    assert_eq!(out, [chunk.get(1..).unwrap(), &chat].concat(), "the chunk under way first");
}

#[test]
fn a_resync_from_the_callers_scanner_is_what_a_pass_would_have_left() {
    let t = Instant::now();
    let chunk = frame(0x21, 3_000);
    let chat = frame(0x02, 2);
    let stream = [chunk.clone(), chat.clone(), chunk.clone(), chat.clone()].concat();
    for cut in 0..stream.len() {
        let mut scanner = crate::FrameScanner::new();
        scanner.scan(stream.get(..cut).unwrap()).unwrap();
        let mut passed = LaneQueue::new(Sorter::default(), 2_097_151);
        passed.pass(stream.get(..cut).unwrap(), t);
        let mut synced = LaneQueue::new(Sorter::default(), 2_097_151);
        synced.resync(scanner.remaining().unwrap_or(0), scanner.prefix());
        passed.push(stream.get(cut..).unwrap(), t);
        synced.push(stream.get(cut..).unwrap(), t);
        assert_eq!(drain(&mut synced, 700, t), drain(&mut passed, 700, t), "cut {cut}");
    }
}

#[test]
fn nothing_overtakes_a_queued_join_game_or_respawn() {
    let t = Instant::now();
    let chunk = frame(0x21, 100);
    let join = frame(0x01, 12);
    let respawn = frame(0x07, 10);
    let time = frame(0x03, 16);
    let health = frame(0x06, 10);
    let chat = frame(0x02, 3);
    // A chat before the Join Game may overtake the chunk before it; the Time Update after it may not overtake
    // it; once the Join Game left, a later Update Health overtakes bulk again until the Respawn.
    let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
    q.push(&[chunk.clone(), chat.clone(), join.clone(), time.clone(), chunk.clone()].concat(), t);
    let first = drain(&mut q, usize::MAX, t);
    assert_eq!(first, [chat.clone(), chunk.clone(), join.clone(), time.clone(), chunk.clone()].concat());
    q.push(&[chunk.clone(), health.clone(), respawn.clone(), health.clone()].concat(), t);
    let second = drain(&mut q, usize::MAX, t);
    assert_eq!(second, [health.clone(), chunk.clone(), respawn.clone(), health.clone()].concat());
    assert!(q.is_empty() && q.at_boundary());
}

#[test]
fn an_urgent_frame_held_back_by_a_barrier_is_not_overtaken_by_a_later_one() {
    let t = Instant::now();
    let join = frame(0x01, 12);
    let chunk = frame(0x21, PIECE_BYTES);
    let (chat1, chat2) = (frame(0x02, 5), frame(0x02, 7));
    let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
    // The Join Game and the chunk fill a piece; chat1, held back behind the Join Game, starts the next one.
    q.push(&[join.clone(), chunk.clone(), chat1.clone()].concat(), t);
    let mut out = BytesMut::new();
    q.take(join.len() + chunk.len(), &mut out, t);
    assert_eq!(out.to_vec(), [join.clone(), chunk.clone()].concat());
    // The Join Game has left; chat1 has not, so chat2 goes behind it.
    q.push(&[chat2.clone(), frame(0x00, 4)].concat(), t);
    assert_eq!(drain(&mut q, usize::MAX, t), [chat1, chat2, frame(0x00, 4)].concat());
    assert!(q.is_empty() && q.at_boundary());
}

#[test]
fn a_head_sent_at_once_and_completed_over_several_batches_loses_no_byte() {
    let t = Instant::now();
    let chunk = frame(0x21, 200);
    let chat = frame(0x02, 2);
    for first in 1..4 {
        for second in first + 1..6 {
            let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
            q.pass(chunk.get(..first).unwrap(), t);
            q.push(chunk.get(first..second).unwrap(), t);
            q.push(&[chunk.get(second..).unwrap(), &chat].concat(), t);
            let out = [chunk.get(..first).unwrap().to_vec(), drain(&mut q, usize::MAX, t)].concat();
            assert_eq!(out, [chunk.clone(), chat.clone()].concat(), "{first} then {second}");
        }
    }
    let mut q = LaneQueue::new(Sorter::default(), 2_097_151);
    q.resync(0, chunk.get(..1).unwrap());
    q.push(chunk.get(1..2).unwrap(), t);
    q.push(chunk.get(2..).unwrap(), t);
    assert_eq!(drain(&mut q, usize::MAX, t), chunk.get(1..).unwrap());
}
