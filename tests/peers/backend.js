'use strict'
// A real node-minecraft-protocol 1.7.10 server used as a MoonBridge backend in the cross-tests.
//
// Usage: node backend.js '{"port":0,"motd":"...","burstCount":70,"burstSize":30000,"keepAlive":true,
//                          "expectForwarded":{"<name>":{"uuid":"<32 hex>","textures":"<value>","token":"<secret>"}}}'
// Prints {"event":"listening","port":N} once ready, then one JSON line per login and chat.
// With `expectForwarded`, the backend acts as a BungeeCord-forwarding server in offline mode: it parses the
// forwarded handshake host (host\0ip\0uuid\0properties) and kicks a player whose UUID, signed textures
// property or bungeeguard-token differ from what is expected (event "forwarding_mismatch").
// Per player: Join Game, then burstCount plugin messages (S3F, channel MB|Burst) of burstSize bytes
// (a Forge registry-sync-sized burst), then each chat message is answered with "echo:<message>"; the chat
// message "bye" makes the backend disconnect the player instead, and "big <count> <size>" makes it send
// <count> plugin messages (channel MB|Big) of burstPayload(1000 + k, size) before the echo.
const mc = require('minecraft-protocol')
const { burstPayload, emit, BURST_CHANNEL } = require('./common')

const opts = Object.assign({ port: 0, motd: 'MoonBridge test backend', burstCount: 70, burstSize: 30000, keepAlive: true },
  JSON.parse(process.argv[2] || '{}'))

const server = mc.createServer({
  'online-mode': false,
  host: '127.0.0.1',
  port: opts.port,
  version: '1.7.10',
  motd: opts.motd,
  maxPlayers: 100,
  keepAlive: opts.keepAlive
})

// The fields of a BungeeCord-forwarded handshake host.
function forwardedFields (serverHost) {
  const [host, ip, uuid, props] = String(serverHost).split('\0')
  let properties = []
  try { properties = props ? JSON.parse(props) : [] } catch (e) { properties = null }
  return { host, ip, uuid, properties }
}

function checkForwarded (client) {
  const want = opts.expectForwarded[client.username]
  const got = forwardedFields(client.serverHost)
  const prop = (name) => (got.properties || []).find((p) => p.name === name)
  const textures = prop('textures')
  const token = prop('bungeeguard-token')
  const problems = []
  if (!want) problems.push('unexpected player')
  else {
    if (got.uuid !== want.uuid) problems.push('uuid ' + got.uuid)
    if (!textures || textures.value !== want.textures || !textures.signature) problems.push('textures ' + JSON.stringify(textures))
    if ((token ? token.value : undefined) !== want.token) problems.push('bungeeguard-token ' + JSON.stringify(token))
  }
  return { got, problems }
}

server.on('login', (client) => {
  const forwarded = opts.expectForwarded ? checkForwarded(client) : null
  emit({ event: 'login', username: client.username, uuid: client.uuid, serverHost: client.serverHost, forwarded: forwarded && forwarded.got })
  if (forwarded && forwarded.problems.length > 0) {
    emit({ event: 'forwarding_mismatch', username: client.username, problems: forwarded.problems })
    return client.end('Forwarded identity mismatch: ' + forwarded.problems.join(', '))
  }
  client.write('login', { entityId: 1, gameMode: 0, dimension: 0, difficulty: 2, maxPlayers: 100, levelType: 'default' })
  client.write('position', { x: 0, y: 64, z: 0, yaw: 0, pitch: 0, onGround: true })
  for (let n = 0; n < opts.burstCount; n++) {
    client.write('custom_payload', { channel: BURST_CHANNEL, data: burstPayload(n, opts.burstSize) })
  }
  client.on('chat', (p) => {
    emit({ event: 'chat', username: client.username, message: p.message })
    // "bye" asks the backend to end the session (a server-side close).
    if (p.message === 'bye') return client.end('Bye from the backend')
    const big = /^big (\d+) (\d+)$/.exec(p.message)
    if (big) {
      for (let k = 0; k < Number(big[1]); k++) {
        client.write('custom_payload', { channel: 'MB|Big', data: burstPayload(1000 + k, Number(big[2])) })
      }
    }
    client.write('chat', { message: JSON.stringify({ text: 'echo:' + p.message }) })
  })
  client.on('error', (e) => emit({ event: 'client_error', username: client.username, error: String(e) }))
})

server.on('error', (e) => { emit({ event: 'error', error: String(e) }); process.exit(1) })
server.on('listening', () => emit({ event: 'listening', port: server.socketServer.address().port }))
