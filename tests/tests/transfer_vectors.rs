//! The entity-id rewriting of a server transfer (`moonbridge_protocol::transfer`) against a real protocol 5
//! implementation: node-minecraft-protocol 1.7.10 (`tests/peers/packets.js`) builds every packet kind the
//! rewriter knows, with the player's id on the new server (300), the id the client knows it by (7) and other
//! ids; the rewriter swaps them; node-minecraft-protocol parses the result, which must hold 7 where 300 was and
//! 300 where 7 was, with every other field unchanged (so the offsets, the VarInt re-encoding and the field
//! layouts agree with an implementation that was not written from the same notes).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use moonbridge_protocol::transfer::{carries_entity_ids, Direction, EntityIdSwap};
use moonbridge_protocol::VarInt;
use serde_json::{json, Value};
use testbed::{NodePeer, STEP};

/// A packet as node-minecraft-protocol names it, its params, and the JSON pointers of its entity ids.
struct Case {
    name: &'static str,
    params: Value,
    ids: &'static [&'static str],
}

/// S0E Spawn Object of an arrow (60) or fishing float (90), whose data field names its shooter or angler.
fn spawn_object(entity: i32, kind: i8, owner: i32) -> Case {
    Case {
        name: "spawn_entity",
        params: json!({
            "entityId": entity, "type": kind, "x": 1, "y": 2, "z": 3, "pitch": 0, "yaw": 0,
            "objectData": { "intField": owner, "velocityX": 1, "velocityY": 2, "velocityZ": 3 }
        }),
        ids: &["/entityId", "/objectData/intField"],
    }
}

fn clientbound() -> Vec<Case> {
    let pos = json!({ "x": 1, "y": 64, "z": -3 });
    vec![
        Case {
            name: "entity_equipment",
            params: json!({ "entityId": 300, "slot": 0, "item": { "blockId": -1 } }),
            ids: &["/entityId"],
        },
        Case { name: "bed", params: json!({ "entityId": 300, "location": pos }), ids: &["/entityId"] },
        Case { name: "animation", params: json!({ "entityId": 300, "animation": 0 }), ids: &["/entityId"] },
        Case {
            name: "named_entity_spawn",
            params: json!({
                "entityId": 7, "playerUUID": "00000000-0000-3000-8000-000000000007", "playerName": "Alex",
                "data": [], "x": 32, "y": 2048, "z": -32, "yaw": 0, "pitch": 0, "currentItem": 0, "metadata": []
            }),
            ids: &["/entityId"],
        },
        Case {
            name: "collect",
            params: json!({ "collectedEntityId": 9, "collectorEntityId": 300 }),
            ids: &["/collectedEntityId", "/collectorEntityId"],
        },
        spawn_object(300, 60, 300),
        spawn_object(21, 90, 7),
        Case {
            name: "spawn_entity_living",
            params: json!({
                "entityId": 7, "type": 50, "x": 0, "y": 0, "z": 0, "yaw": 0, "pitch": 0, "headPitch": 0,
                "velocity": { "x": 0, "y": 0, "z": 0 }, "metadata": []
            }),
            ids: &["/entityId"],
        },
        Case {
            name: "spawn_entity_painting",
            params: json!({ "entityId": 300, "title": "Kebab", "location": pos, "direction": 2 }),
            ids: &["/entityId"],
        },
        Case {
            name: "spawn_entity_experience_orb",
            params: json!({ "entityId": 300, "x": 1, "y": 2, "z": 3, "count": 5 }),
            ids: &["/entityId"],
        },
        Case {
            name: "entity_velocity",
            params: json!({ "entityId": 300, "velocity": { "x": 1, "y": -2, "z": 3 } }),
            ids: &["/entityId"],
        },
        Case {
            name: "entity_destroy",
            params: json!({ "entityIds": [9, 300, 7] }),
            ids: &["/entityIds/0", "/entityIds/1", "/entityIds/2"],
        },
        Case { name: "entity", params: json!({ "entityId": 300 }), ids: &["/entityId"] },
        Case {
            name: "rel_entity_move",
            params: json!({ "entityId": 300, "dX": 1, "dY": -1, "dZ": 0 }),
            ids: &["/entityId"],
        },
        Case { name: "entity_look", params: json!({ "entityId": 300, "yaw": 5, "pitch": -5 }), ids: &["/entityId"] },
        Case {
            name: "entity_move_look",
            params: json!({ "entityId": 300, "dX": 1, "dY": 2, "dZ": 3, "yaw": 4, "pitch": 5 }),
            ids: &["/entityId"],
        },
        Case {
            name: "entity_teleport",
            params: json!({ "entityId": 300, "x": 1, "y": 2, "z": 3, "yaw": 4, "pitch": 5 }),
            ids: &["/entityId"],
        },
        Case { name: "entity_head_rotation", params: json!({ "entityId": 300, "headYaw": 9 }), ids: &["/entityId"] },
        Case { name: "entity_status", params: json!({ "entityId": 300, "entityStatus": 2 }), ids: &["/entityId"] },
        Case {
            name: "attach_entity",
            params: json!({ "entityId": 300, "vehicleId": 7, "leash": false }),
            ids: &["/entityId", "/vehicleId"],
        },
        Case { name: "entity_metadata", params: json!({ "entityId": 300, "metadata": [] }), ids: &["/entityId"] },
        Case {
            name: "entity_effect",
            params: json!({ "entityId": 300, "effectId": 1, "amplifier": 0, "duration": 600 }),
            ids: &["/entityId"],
        },
        Case { name: "remove_entity_effect", params: json!({ "entityId": 300, "effectId": 1 }), ids: &["/entityId"] },
        Case {
            name: "update_attributes",
            params: json!({ "entityId": 300, "properties": [
                { "key": "generic.movementSpeed", "value": 0.1, "modifiers": [] }
            ] }),
            ids: &["/entityId"],
        },
        Case {
            name: "block_break_animation",
            params: json!({ "entityId": 300, "location": pos, "destroyStage": 3 }),
            ids: &["/entityId"],
        },
        Case {
            name: "spawn_entity_weather",
            params: json!({ "entityId": 300, "type": 1, "x": 1, "y": 2, "z": 3 }),
            ids: &["/entityId"],
        },
        Case {
            name: "open_window",
            params: json!({
                "windowId": 1, "inventoryType": 11, "windowTitle": "Horse", "slotCount": 2,
                "useProvidedTitle": true, "entityId": 300
            }),
            ids: &["/entityId"],
        },
    ]
}

fn serverbound() -> Vec<Case> {
    vec![
        Case { name: "use_entity", params: json!({ "target": 300, "mouse": 0 }), ids: &["/target"] },
        Case { name: "arm_animation", params: json!({ "entityId": 7, "animation": 1 }), ids: &["/entityId"] },
        Case {
            name: "entity_action",
            params: json!({ "entityId": 7, "actionId": "start_sneaking", "jumpBoost": 0 }),
            ids: &["/entityId"],
        },
    ]
}

/// Runs `packets.js` once.
async fn nmp(direction: &str, serialize: Vec<Value>, parse: Vec<String>) -> Value {
    let mut peer =
        NodePeer::spawn("packets.js", &json!({ "direction": direction, "serialize": serialize, "parse": parse })).await;
    peer.next_lines(1, STEP).await.remove(0)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

async fn check(direction: Direction, node_direction: &str, cases: Vec<Case>) {
    let swap = EntityIdSwap::new(7, 300);
    let packets = cases.iter().map(|c| json!({ "name": c.name, "params": c.params })).collect();
    let built = nmp(node_direction, packets, Vec::new()).await;
    let serialized = built["serialized"].as_array().expect("serialized");
    assert_eq!(serialized.len(), cases.len());
    let mut rewritten = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (case, packet) in cases.iter().zip(serialized) {
        let bytes = unhex(packet.as_str().expect("hex string"));
        let (id, n) = VarInt::decode_partial(&bytes).expect("packet id");
        assert!(carries_entity_ids(direction, id), "{} (0x{id:02x}) is not in the table", case.name);
        seen.insert(id);
        let mut body = bytes[n..].to_vec();
        assert_eq!(swap.rewrite(direction, id, &mut body), Ok(true), "{}", case.name);
        let mut out = bytes[..n].to_vec();
        out.extend_from_slice(&body);
        rewritten.push(hex(&out));
    }
    // Every packet id the rewriter knows is built here (protocol 5 Play ids run to 0x40), except S3F, whose
    // entity ids sit inside a plugin's bytes (`forge_entity_messages_round_trip_through_node_minecraft_protocol`).
    let known: std::collections::BTreeSet<i32> =
        (0..=0x40).filter(|&id| id != 0x3f && carries_entity_ids(direction, id)).collect();
    assert_eq!(seen, known, "packets the rewriter knows against the packets this test builds");
    let read = nmp(node_direction, Vec::new(), rewritten).await;
    let parsed = read["parsed"].as_array().expect("parsed");
    assert_eq!(parsed.len(), cases.len());
    for (case, got) in cases.iter().zip(parsed) {
        assert_eq!(got["size"], got["length"], "{}: the parser read every byte", case.name);
        let mut want = case.params.clone();
        for pointer in case.ids {
            let field = want.pointer_mut(pointer).expect("pointer into the params");
            let id = i32::try_from(field.as_i64().expect("numeric id")).expect("i32 id");
            *field = json!(swap.map(id));
        }
        assert_eq!(got["name"], case.name);
        assert_eq!(got["params"], want, "{} after the rewrite", case.name);
    }
}

#[tokio::test]
async fn every_clientbound_packet_with_entity_ids_round_trips_through_node_minecraft_protocol() {
    check(Direction::Clientbound, "toClient", clientbound()).await;
}

/// Forge's EntityAdjustMessage (discriminator 3: entity id, x, y, z) on the `FML` channel of an S3F that
/// node-minecraft-protocol built: the rewriter swaps the id inside the plugin's bytes and the parser reads
/// the same channel and length back.
#[tokio::test]
async fn forge_entity_messages_round_trip_through_node_minecraft_protocol() {
    let data = |entity: i32| {
        let mut d = vec![3];
        d.extend_from_slice(&entity.to_be_bytes());
        d.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]);
        d
    };
    let packet = json!({ "name": "custom_payload", "params": { "channel": "FML", "data": { "type": "Buffer", "data": data(300) } } });
    let built = nmp("toClient", vec![packet], Vec::new()).await;
    let bytes = unhex(built["serialized"][0].as_str().expect("serialized"));
    let (id, n) = VarInt::decode_partial(&bytes).expect("packet id");
    assert_eq!(id, 0x3f);
    let mut body = bytes[n..].to_vec();
    assert_eq!(EntityIdSwap::new(7, 300).rewrite(Direction::Clientbound, id, &mut body), Ok(true));
    let mut out = bytes[..n].to_vec();
    out.extend_from_slice(&body);
    let read = nmp("toClient", Vec::new(), vec![hex(&out)]).await;
    let got = &read["parsed"][0];
    assert_eq!(got["size"], got["length"]);
    assert_eq!(got["params"]["channel"], "FML");
    assert_eq!(got["params"]["data"], json!({ "type": "Buffer", "data": data(7) }));
}

#[tokio::test]
async fn every_serverbound_packet_with_entity_ids_round_trips_through_node_minecraft_protocol() {
    check(Direction::Serverbound, "toServer", serverbound()).await;
}
