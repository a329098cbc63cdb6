'use strict'
// Serializes and parses single protocol 5 (1.7.10) Play packets with node-minecraft-protocol's own
// serializer, for byte-level cross-checks of the protocol crate (tests/tests/transfer_vectors.rs).
//
// Usage: node packets.js '{"direction":"toClient","serialize":[{"name":..,"params":..}],"parse":["hex",..]}'
// Prints one JSON line: {"serialized":["hex",..],"parsed":[{"name":..,"params":..,"size":..,"length":..},..]}
// (a packet is its VarInt id followed by its fields, without the frame length).
const mc = require('minecraft-protocol')
const { emit } = require('./common')

// A Buffer travels as JSON.stringify writes one: {"type":"Buffer","data":[bytes]}.
const opts = JSON.parse(process.argv[2], (k, v) => (v && v.type === 'Buffer' && Array.isArray(v.data)) ? Buffer.from(v.data) : v)
// toClient packets are what a server writes and a client reads.
const isServer = opts.direction === 'toClient'
const serializer = mc.createSerializer({ state: 'play', isServer, version: '1.7.10' })
const deserializer = mc.createDeserializer({ state: 'play', isServer: !isServer, version: '1.7.10' })

const serialized = (opts.serialize || []).map(p => serializer.createPacketBuffer(p).toString('hex'))
// `size` is how many bytes the parser read, so a packet with bytes left over is caught by the caller.
const parsed = (opts.parse || []).map(hex => {
  const buffer = Buffer.from(hex, 'hex')
  const { data, metadata } = deserializer.parsePacketBuffer(buffer)
  return { name: data.name, params: data.params, size: metadata.size, length: buffer.length }
})
emit({ serialized, parsed })
