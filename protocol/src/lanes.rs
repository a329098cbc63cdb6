//! Priority lanes for a clientbound Play stream: the frames whose meaning does not depend on the world state
//! that bulk frames bring (Keep Alive, Chat, …) go in the **urgent** lane and may overtake **bulk** frames not
//! sent yet; within a lane the order never changes, and a frame once started is finished before anything else.
//!
//! Sans-IO: [`LaneQueue::push`] takes the plaintext stream as the backend sent it (split anywhere), sorts its
//! frames, and [`LaneQueue::take`] gives the bytes to send next. The caller passes the time (`now`) so that each
//! lane's queue age and the urgent lane's delay can be measured; nothing here reads a clock.
//!
//! Frame layout (protocol 5): `VarInt length`, then the body: `VarInt packet id`, fields. The urgent set,
//! [`URGENT_PACKETS`], and why each is there: `docs/lanes.md`. A Plugin Message (S3F: `String channel`, data) is
//! urgent only when its channel is one the operator named ([`Sorter::with_channels`]).
//!
//! While a Join Game or a Respawn is queued ([`BARRIER_PACKETS`]) nothing overtakes it: frames after it are bulk,
//! and an urgent frame so held back is itself a barrier until it has left (urgent frames keep their order).
//!
//! When the stream stops parsing (a length past the limit, a malformed VarInt), the queue stops sorting: from
//! there on every byte goes to the bulk lane, in order ([`LaneQueue::sorting`] turns false).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};

use crate::varint::{VarInt, VarIntDecodeError};

/// A lane of the clientbound stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Frames that may overtake bulk frames not sent yet.
    Urgent,
    /// Everything else, in the order the backend sent it.
    Bulk,
}

/// Packet ids (Play, clientbound, protocol 5) of the urgent lane: Keep Alive S00, Chat Message S02, Time Update
/// S03, Update Health S06, Player List Item S38, Tab-Complete S3A, Disconnect S40.
pub const URGENT_PACKETS: [i32; 7] = [0x00, 0x02, 0x03, 0x06, 0x38, 0x3a, 0x40];

/// Packet ids (Play, clientbound) that no frame may overtake while they are queued: Join Game S01 and Respawn
/// S07. Before Join Game the client has no world and no player (a Time Update or an Update Health then would
/// dereference them); a Respawn replaces the player, so an Update Health meant for the new one must not reach
/// the old one.
pub const BARRIER_PACKETS: [i32; 2] = [0x01, 0x07];

/// The Plugin Message packet id (Play, clientbound).
const PLUGIN_MESSAGE: i32 = 0x3f;

/// The longest channel name an operator may name (protocol 5: 20 characters, here bytes).
pub const MAX_CHANNEL_BYTES: usize = 20;

/// The longest frame head the sorter needs to see before it can name the frame's lane: the length and packet
/// id VarInts, and a Plugin Message's channel (its length VarInt and at most 20 bytes, 4 when it is 20
/// characters of UTF-8 at most 80).
const MAX_HEAD: usize = VarInt::MAX_SIZE * 3 + MAX_CHANNEL_BYTES * 4;

/// Consecutive frames of one lane are kept together in pieces of about this many bytes: a piece once started
/// is sent whole, so this bounds what an urgent frame may wait behind (besides a frame longer than it).
pub const PIECE_BYTES: usize = 16 * 1024;

/// Which packets are urgent: [`URGENT_PACKETS`] and the Plugin Messages of the channels an operator named.
#[derive(Clone, Debug, Default)]
pub struct Sorter {
    channels: Vec<Vec<u8>>,
}

impl Sorter {
    /// The urgent set with Plugin Messages of `channels` (each at most [`MAX_CHANNEL_BYTES`]; longer names can
    /// never match and are ignored) in the urgent lane too.
    pub fn with_channels<S: AsRef<str>>(channels: &[S]) -> Self {
        let channels =
            channels.iter().map(|c| c.as_ref().as_bytes().to_vec()).filter(|c| c.len() <= MAX_CHANNEL_BYTES).collect();
        Self { channels }
    }

    /// The lane of a frame whose body starts with `body` (the packet id first; a Plugin Message's channel
    /// after it). `None` when `body` is too short to tell yet; a body that is not a valid start is bulk.
    pub fn lane(&self, body: &[u8], body_len: usize) -> Option<Lane> {
        let (id, n) = match VarInt::decode_partial(body) {
            Ok(v) => v,
            Err(VarIntDecodeError::Incomplete) if body.len() < body_len => return None,
            Err(_) => return Some(Lane::Bulk),
        };
        if URGENT_PACKETS.contains(&id) {
            return Some(Lane::Urgent);
        }
        if id != PLUGIN_MESSAGE || self.channels.is_empty() {
            return Some(Lane::Bulk);
        }
        let rest = body.get(n..).unwrap_or_default();
        let (len, m) = match VarInt::decode_partial(rest) {
            Ok(v) => v,
            Err(VarIntDecodeError::Incomplete) if body.len() < body_len => return None,
            Err(_) => return Some(Lane::Bulk),
        };
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > MAX_CHANNEL_BYTES * 4 {
            return Some(Lane::Bulk);
        }
        match rest.get(m..m + len) {
            Some(name) => Some(if self.channels.iter().any(|c| c == name) { Lane::Urgent } else { Lane::Bulk }),
            None if body.len() < body_len => None,
            None => Some(Lane::Bulk),
        }
    }
}

/// A run of a lane's bytes, queued at one time.
#[derive(Debug)]
struct Piece {
    bytes: Bytes,
    /// The piece ends at a frame boundary (false: the frame goes on in the lane's next piece).
    complete: bool,
    /// When it was queued.
    at: Instant,
    /// Barrier frames (Join Game, Respawn, and urgent frames held back behind one) that end in it.
    barriers: usize,
}

/// One lane's queue.
#[derive(Debug, Default)]
struct LaneBuf {
    pieces: VecDeque<Piece>,
    bytes: usize,
    /// Frames sorted into this lane in the batch being pushed, not yet cut into a piece.
    open: BytesMut,
    /// Barrier frames that end in `open`.
    open_barriers: usize,
}

impl LaneBuf {
    fn cut(&mut self, complete: bool, at: Instant) {
        if self.open.is_empty() {
            return;
        }
        let bytes = self.open.split().freeze();
        self.bytes += bytes.len();
        let barriers = std::mem::take(&mut self.open_barriers);
        self.pieces.push_back(Piece { bytes, complete, at, barriers });
    }
}

/// Where the sorter stands in the stream.
#[derive(Debug)]
enum Cursor {
    /// Collecting a frame's head (at most [`MAX_HEAD`] bytes) until its lane is known.
    Head(Vec<u8>),
    /// Inside a frame of `lane` with `rest` bytes to go; `barrier`: a Join Game or Respawn being queued.
    Body { lane: Lane, rest: usize, barrier: bool },
    /// The stream stopped parsing: everything is bulk.
    Lost,
}

/// What [`LaneQueue::take`] gave, for the figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// Bytes appended to the output.
    pub bytes: usize,
    /// The longest an urgent piece in them waited in the queue (`None`: no urgent bytes).
    pub urgent_wait: Option<Duration>,
}

/// The clientbound queue of one player: two lanes, the sorter, and the frame under way in the output.
#[derive(Debug)]
pub struct LaneQueue {
    sorter: Sorter,
    max_frame_len: usize,
    urgent: LaneBuf,
    bulk: LaneBuf,
    cursor: Cursor,
    /// The lane whose frame the output is inside (its next bytes must go before anything else).
    under_way: Option<Lane>,
    /// How many bytes of the held frame head were sent already ([`LaneQueue::pass`]): its frame is under way,
    /// lane not known yet.
    head_sent: usize,
    /// Barrier frames queued and not yet sent whole: while there are any, no frame overtakes (see
    /// [`BARRIER_PACKETS`]; urgent frames held back behind one count too).
    barriers: usize,
}

impl LaneQueue {
    /// An empty queue at the start of a frame; frames longer than `max_frame_len` stop the sorting.
    pub fn new(sorter: Sorter, max_frame_len: usize) -> Self {
        Self {
            sorter,
            max_frame_len,
            urgent: LaneBuf::default(),
            bulk: LaneBuf::default(),
            cursor: Cursor::Head(Vec::new()),
            under_way: None,
            head_sent: 0,
            barriers: 0,
        }
    }

    /// [`LaneQueue::new`] for a stream whose bytes sent so far end inside a frame with `rest` bytes to go (0:
    /// at a boundary): that frame's rest goes first, as bulk.
    pub fn inside(sorter: Sorter, max_frame_len: usize, rest: usize) -> Self {
        let mut q = Self::new(sorter, max_frame_len);
        if rest > 0 {
            q.cursor = Cursor::Body { lane: Lane::Bulk, rest, barrier: false };
            q.under_way = Some(Lane::Bulk);
        }
        q
    }

    fn lane(&self, lane: Lane) -> &LaneBuf {
        match lane {
            Lane::Urgent => &self.urgent,
            Lane::Bulk => &self.bulk,
        }
    }

    fn lane_mut(&mut self, lane: Lane) -> &mut LaneBuf {
        match lane {
            Lane::Urgent => &mut self.urgent,
            Lane::Bulk => &mut self.bulk,
        }
    }

    /// Whether frames are still sorted (false after the stream stopped parsing).
    pub fn sorting(&self) -> bool {
        !matches!(self.cursor, Cursor::Lost)
    }

    /// Bytes queued in `lane` (a frame head not yet sorted is not counted; see [`LaneQueue::held`]).
    pub fn queued(&self, lane: Lane) -> usize {
        self.lane(lane).bytes
    }

    /// Bytes queued in both lanes and held in a frame head not sorted yet.
    pub fn len(&self) -> usize {
        self.queued(Lane::Urgent) + self.queued(Lane::Bulk) + self.held()
    }

    /// True when nothing is queued or held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of a frame head held until its lane is known (at most 95).
    pub fn held(&self) -> usize {
        match &self.cursor {
            Cursor::Head(h) => h.len(),
            _ => 0,
        }
    }

    /// How long the oldest byte of `lane` has waited at `now` (`None`: the lane is empty).
    pub fn age(&self, lane: Lane, now: Instant) -> Option<Duration> {
        self.lane(lane).pieces.front().map(|p| now.saturating_duration_since(p.at))
    }

    /// True when the bytes sent so far end at a frame boundary (something may be inserted into the stream).
    pub fn at_boundary(&self) -> bool {
        self.under_way.is_none() && self.head_sent == 0
    }

    /// True when [`LaneQueue::take`] would give nothing: both lanes are empty, or the frame under way waits for
    /// bytes the backend has not sent yet.
    pub fn stalled(&self) -> bool {
        if self.head_sent > 0 {
            return true;
        }
        match self.under_way {
            Some(l) => self.lane(l).pieces.is_empty(),
            None => self.urgent.pieces.is_empty() && self.bulk.pieces.is_empty(),
        }
    }

    /// Queues a batch of the backend's plaintext stream, received at `now`: each frame into its lane.
    pub fn push(&mut self, data: &[u8], now: Instant) {
        self.feed(data, now, true);
    }

    /// Follows a batch the caller sent at once, without queueing it (only when the queue [`is_empty`]): the
    /// next batch is sorted from where this one ended, and a frame it ended inside is under way.
    ///
    /// [`is_empty`]: LaneQueue::is_empty
    pub fn pass(&mut self, data: &[u8], now: Instant) {
        self.feed(data, now, false);
        self.under_way = match &self.cursor {
            Cursor::Body { lane, .. } => Some(*lane),
            Cursor::Lost => Some(Lane::Bulk),
            Cursor::Head(h) => {
                self.head_sent = h.len();
                None
            }
        };
    }

    /// What [`LaneQueue::pass`] does, from where the caller's own frame scanner stands after bytes it sent at
    /// once (only when the queue [`is_empty`]): `rest` bytes left of the frame under way, or `prefix`, the
    /// start of a length prefix. No byte is looked at again.
    ///
    /// [`is_empty`]: LaneQueue::is_empty
    pub fn resync(&mut self, rest: usize, prefix: &[u8]) {
        if !self.sorting() {
            return;
        }
        self.head_sent = prefix.len();
        (self.cursor, self.under_way) = if self.head_sent > 0 {
            (Cursor::Head(prefix.to_vec()), None)
        } else if rest > 0 {
            (Cursor::Body { lane: Lane::Bulk, rest, barrier: false }, Some(Lane::Bulk))
        } else {
            (Cursor::Head(Vec::new()), None)
        };
    }

    /// The stream stopped being followed: from here on everything is bulk, in order.
    pub fn lose(&mut self) {
        self.cursor = Cursor::Lost;
    }

    fn feed(&mut self, mut data: &[u8], now: Instant, keep: bool) {
        // A frame this batch continues ends its piece: what is under way is no more than that frame's rest.
        let mut continuing = matches!(self.cursor, Cursor::Body { .. }) || self.head_sent > 0;
        while !data.is_empty() {
            match &mut self.cursor {
                Cursor::Lost => {
                    if keep {
                        self.bulk.open.extend_from_slice(data);
                    }
                    data = &[];
                }
                Cursor::Body { lane, rest, barrier } => {
                    let n = (*rest).min(data.len());
                    let (part, tail) = data.split_at(n);
                    let buf = match lane {
                        Lane::Urgent => &mut self.urgent,
                        Lane::Bulk => &mut self.bulk,
                    };
                    if keep {
                        buf.open.extend_from_slice(part);
                    }
                    *rest -= n;
                    data = tail;
                    if *rest == 0 {
                        if *barrier {
                            buf.open_barriers += 1;
                        }
                        if buf.open.len() >= PIECE_BYTES || std::mem::take(&mut continuing) {
                            buf.cut(true, now);
                        }
                        self.cursor = Cursor::Head(Vec::new());
                    }
                }
                Cursor::Head(head) => {
                    // Peek at the head held so far and this batch's first bytes (no copy when none is held).
                    let held = std::mem::take(head);
                    let step = if held.is_empty() {
                        classify(&self.sorter, self.max_frame_len, data)
                    } else {
                        let mut view = held.clone();
                        view.extend_from_slice(data.get(..MAX_HEAD.min(data.len())).unwrap_or_default());
                        classify(&self.sorter, self.max_frame_len, &view)
                    };
                    match step {
                        HeadStep::Wait => {
                            let mut held = held;
                            held.extend_from_slice(data);
                            self.cursor = Cursor::Head(held);
                            data = &[];
                        }
                        HeadStep::Lost => {
                            self.queue_head(Lane::Bulk, &held, keep);
                            self.cursor = Cursor::Lost;
                        }
                        HeadStep::Frame { lane, total, barrier } => {
                            // Behind a queued Join Game or Respawn nothing overtakes, and an urgent frame
                            // held back by one is a barrier itself until it has left: a later urgent frame
                            // must not overtake it (two chats keep their order).
                            let held_back = self.barriers > 0 && lane == Lane::Urgent;
                            let lane = if held_back { Lane::Bulk } else { lane };
                            let barrier = (barrier || held_back) && keep;
                            self.barriers += usize::from(barrier);
                            self.queue_head(lane, &held, keep);
                            self.cursor = Cursor::Body { lane, rest: total - held.len(), barrier };
                        }
                    }
                }
            }
        }
        let open_lane = match self.cursor {
            Cursor::Body { lane, .. } => Some(lane),
            Cursor::Lost => Some(Lane::Bulk),
            Cursor::Head(_) => None,
        };
        // The frame under way goes on in the next batch: its lane's last piece does not end it.
        self.urgent.cut(open_lane != Some(Lane::Urgent), now);
        self.bulk.cut(open_lane != Some(Lane::Bulk), now);
    }

    /// A frame head held until its lane was known goes into `lane` (when it was not sent already; then the
    /// frame is under way in `lane`).
    fn queue_head(&mut self, lane: Lane, held: &[u8], keep: bool) {
        let sent = std::mem::take(&mut self.head_sent).min(held.len());
        if sent > 0 {
            self.under_way = Some(lane);
        }
        if keep {
            self.lane_mut(lane).open.extend_from_slice(held.get(sent..).unwrap_or_default());
        }
    }

    /// Appends to `out` the next bytes to send, at most `max`: the rest of the frame under way, then the urgent
    /// lane, then the bulk lane. Stops early when the frame under way waits for bytes not received yet.
    pub fn take(&mut self, max: usize, out: &mut BytesMut, now: Instant) -> Taken {
        let mut taken = Taken::default();
        while taken.bytes < max {
            let lane = match self.under_way {
                Some(l) => l,
                None if !self.urgent.pieces.is_empty() => Lane::Urgent,
                None => Lane::Bulk,
            };
            let buf = self.lane_mut(lane);
            let Some(piece) = buf.pieces.front_mut() else { break };
            if lane == Lane::Urgent {
                let waited = now.saturating_duration_since(piece.at);
                taken.urgent_wait = Some(taken.urgent_wait.map_or(waited, |w| w.max(waited)));
            }
            let n = piece.bytes.len().min(max - taken.bytes);
            out.extend_from_slice(piece.bytes.get(..n).unwrap_or_default());
            taken.bytes += n;
            buf.bytes -= n;
            if n == piece.bytes.len() {
                let (complete, barriers) = (piece.complete, piece.barriers);
                buf.pieces.pop_front();
                self.barriers = self.barriers.saturating_sub(barriers);
                self.under_way = (!complete).then_some(lane);
            } else {
                piece.bytes.advance(n);
                self.under_way = Some(lane);
            }
        }
        taken
    }

    /// Everything queued, in the order [`LaneQueue::take`] gives it, as one buffer; the queue is empty
    /// afterwards but for a held frame head.
    pub fn take_all(&mut self, now: Instant) -> (BytesMut, Taken) {
        let mut out = BytesMut::with_capacity(self.queued(Lane::Urgent) + self.queued(Lane::Bulk));
        let taken = self.take(usize::MAX, &mut out, now);
        (out, taken)
    }
}

/// What a frame head says.
enum HeadStep {
    /// Not enough bytes to tell the lane.
    Wait,
    /// The stream does not parse here.
    Lost,
    /// A frame of `total` bytes (its length prefix included) for `lane`; `barrier`: a Join Game or Respawn.
    Frame { lane: Lane, total: usize, barrier: bool },
}

/// Reads a frame head from `view` (it starts at a frame boundary).
fn classify(sorter: &Sorter, max_frame_len: usize, view: &[u8]) -> HeadStep {
    let (len, n) = match VarInt::decode_partial(view) {
        Ok(v) => v,
        Err(VarIntDecodeError::Incomplete) => return HeadStep::Wait,
        Err(_) => return HeadStep::Lost,
    };
    let Ok(len) = usize::try_from(len) else { return HeadStep::Lost };
    if len == 0 || len > max_frame_len {
        return HeadStep::Lost;
    }
    let body = view.get(n..).unwrap_or_default();
    let body = body.get(..len.min(body.len())).unwrap_or_default();
    let barrier = matches!(VarInt::decode_partial(body), Ok((id, _)) if BARRIER_PACKETS.contains(&id));
    match sorter.lane(body, len) {
        None => HeadStep::Wait,
        Some(lane) => HeadStep::Frame { lane, total: n + len, barrier },
    }
}

#[cfg(test)]
mod tests;
