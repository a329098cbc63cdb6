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
// Server transfers (docs/servers.md): "entityId" (default 1) is the player's id in Join Game; "label" prefixes
// the echo with "[label] "; the chat message "connect <server>" makes the backend send BungeeCord's Connect
// message (S3F on channel BungeeCord, writeUTF "Connect", writeUTF server) as a server plugin does; "entity"
// makes it send packets about the player's own entity (metadata, animation, velocity) and, with
// "otherEntityId", a velocity for that other entity; "decorate" makes it send a scoreboard objective
// "obj_<label>", a team "team_<label>", a tab-list entry "Ghost_<label>" and open window 5;
// "fmlentity" sends Forge's EntityAdjustMessage about the player (FML channel);
// "kick <reason>" disconnects the player with <reason>; "bungee <hex>" sends the bytes as a BungeeCord plugin
// message (a request to the proxy, as a server plugin sends it); "crash" resets the player's connection with
// no Play Disconnect (an RST: a crashed server), "vanish" closes it with none (a FIN: a killed process).
// "duplicate" decides a second login of a name in play, as servers do: "kick_existing" (a vanilla server: the
// older connection gets "You logged in from another location") or "refuse_new" (the new one is disconnected
// before its Join Game: event "refused_duplicate"); without it both stay.
// With a label, a player leaving is an event "left", a REGISTER plugin message an event "register", and a
// BungeeCord plugin message from the proxy an event "bungee" (its data in hex).
const mc = require('minecraft-protocol')
const { burstPayload, emit, BURST_CHANNEL } = require('./common')

const opts = Object.assign({ port: 0, motd: 'MoonBridge test backend', burstCount: 70, burstSize: 30000, keepAlive: true,
  entityId: 1, label: null, otherEntityId: null, duplicate: null },
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

const playing = new Map()

server.on('login', (client) => {
  const older = playing.get(client.username)
  if (older && opts.duplicate === 'refuse_new') {
    emit({ event: 'refused_duplicate', username: client.username })
    return client.end('You are already playing')
  }
  if (older && opts.duplicate === 'kick_existing') older.end('You logged in from another location')
  playing.set(client.username, client)
  client.on('end', () => { if (playing.get(client.username) === client) playing.delete(client.username) })
  const forwarded = opts.expectForwarded ? checkForwarded(client) : null
  emit({ event: 'login', username: client.username, uuid: client.uuid, serverHost: client.serverHost, forwarded: forwarded && forwarded.got })
  if (forwarded && forwarded.problems.length > 0) {
    emit({ event: 'forwarding_mismatch', username: client.username, problems: forwarded.problems })
    return client.end('Forwarded identity mismatch: ' + forwarded.problems.join(', '))
  }
  client.write('login', { entityId: opts.entityId, gameMode: 0, dimension: 0, difficulty: 2, maxPlayers: 100, levelType: 'default' })
  client.write('position', { x: 0, y: 64, z: 0, yaw: 0, pitch: 0, onGround: true })
  for (let n = 0; n < opts.burstCount; n++) {
    client.write('custom_payload', { channel: BURST_CHANNEL, data: burstPayload(n, opts.burstSize) })
  }
  client.on('chat', (p) => {
    emit({ event: 'chat', username: client.username, message: p.message })
    // "bye" asks the backend to end the session (a server-side close).
    if (p.message === 'bye') return client.end('Bye from the backend')
    const kick = /^kick (.+)$/.exec(p.message)
    if (kick) return client.end(kick[1])
    if (p.message === 'crash') return client.socket.resetAndDestroy()
    if (p.message === 'vanish') return client.socket.destroy()
    const bungee = /^bungee ([0-9a-f]*)$/.exec(p.message)
    if (bungee) client.write('custom_payload', { channel: 'BungeeCord', data: Buffer.from(bungee[1], 'hex') })
    const connect = /^connect (.+)$/.exec(p.message)
    if (connect) return client.write('custom_payload', { channel: 'BungeeCord', data: Buffer.concat([writeUTF('Connect'), writeUTF(connect[1])]) })
    if (p.message === 'decorate') {
      // What a server leaves on a client: a scoreboard objective, a team, a tab-list entry, an open window.
      client.write('scoreboard_objective', { name: 'obj_' + opts.label, displayText: 'Kills', action: 0 })
      client.write('scoreboard_team', { team: 'team_' + opts.label, mode: 0, name: 'Team', prefix: '', suffix: '', friendlyFire: 1, players: [client.username] })
      client.write('player_info', { playerName: 'Ghost_' + opts.label, online: true, ping: 5 })
      client.write('open_window', { windowId: 5, inventoryType: 0, windowTitle: 'Chest', slotCount: 27, useProvidedTitle: true })
    }
    if (p.message === 'entity') {
      const id = opts.entityId
      client.write('entity_metadata', { entityId: id, metadata: [{ type: 0, key: 0, value: 2 }] })
      client.write('animation', { entityId: id, animation: 0 })
      client.write('entity_velocity', { entityId: id, velocity: { x: 1, y: 2, z: 3 } })
      if (opts.otherEntityId !== null) client.write('entity_velocity', { entityId: opts.otherEntityId, velocity: { x: 4, y: 5, z: 6 } })
    }
    if (p.message === 'fmlentity') {
      // Forge's EntityAdjustMessage (FML channel, discriminator 3): the player's entity id, then x, y, z.
      const data = Buffer.alloc(17)
      data.writeUInt8(3, 0)
      data.writeInt32BE(opts.entityId, 1)
      client.write('custom_payload', { channel: 'FML', data })
    }
    const big = /^big (\d+) (\d+)$/.exec(p.message)
    if (big) {
      for (let k = 0; k < Number(big[1]); k++) {
        client.write('custom_payload', { channel: 'MB|Big', data: burstPayload(1000 + k, Number(big[2])) })
      }
    }
    client.write('chat', { message: JSON.stringify({ text: (opts.label ? '[' + opts.label + '] ' : '') + 'echo:' + p.message }) })
  })
  if (opts.label) client.on('end', () => emit({ event: 'left', username: client.username }))
  if (opts.label) {
    client.on('custom_payload', (p) => {
      if (p.channel === 'REGISTER') emit({ event: 'register', username: client.username, channels: p.data.toString().split('\0') })
      if (p.channel === 'BungeeCord') emit({ event: 'bungee', username: client.username, data: p.data.toString('hex') })
    })
  }
  client.on('error', (e) => emit({ event: 'client_error', username: client.username, error: String(e) }))
})

// Java's DataOutput.writeUTF: u16 byte length, then the bytes (modified UTF-8; plain ASCII here).
function writeUTF (s) {
  const b = Buffer.from(s, 'utf8')
  const len = Buffer.alloc(2)
  len.writeUInt16BE(b.length)
  return Buffer.concat([len, b])
}

server.on('error', (e) => { emit({ event: 'error', error: String(e) }); process.exit(1) })
server.on('listening', () => emit({ event: 'listening', port: server.socketServer.address().port }))
