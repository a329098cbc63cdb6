//! Arbitrary Play packets through the entity-id swap of a server transfer (`moonbridge_protocol::transfer`):
//! it never panics, an error leaves the body as it was, and the swap is its own inverse (rewriting twice
//! gives the same bytes back).
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::transfer::{Direction, EntityIdSwap};

fuzz_target!(|data: &[u8]| {
    let Some((&head, body)) = data.split_first() else { return };
    let direction = if head & 0x80 == 0 { Direction::Clientbound } else { Direction::Serverbound };
    let id = i32::from(head & 0x7f);
    // The ids of the seeds: 7 (a one-byte VarInt) and 300 (two bytes); the fuzzer finds them from the
    // comparisons.
    let swap = EntityIdSwap::new(7, 300);
    let mut b = body.to_vec();
    match swap.rewrite(direction, id, &mut b) {
        Ok(true) => {
            // Swapped twice, the bytes come back (from the first result on: a VarInt sent with more bytes than
            // it needs comes out in its shortest form).
            let mut back = b.clone();
            assert_eq!(swap.rewrite(direction, id, &mut back), Ok(true));
            let mut again = back.clone();
            assert_eq!(swap.rewrite(direction, id, &mut again), Ok(true));
            assert_eq!(again, b, "the swap is its own inverse");
        }
        Ok(false) => assert_eq!(b, body),
        Err(_) => assert_eq!(b, body, "an error changes nothing"),
    }
});
