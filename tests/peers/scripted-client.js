'use strict'
// One real node-minecraft-protocol 1.7.10 client that follows a script, for the server-transfer tests.
//
// Usage: node scripted-client.js '{"host":"127.0.0.1","port":N,"username":"Mover","serverHost":"mc.example.com",
//                                  "steps":[{"say":"connect lobby","until":"respawn","count":2}, ...],"timeoutMs":30000}'
// After Join Game, each step sends its chat message and waits until `count` packets named `until` (minecraft-data
// names) have arrived since. Then it prints {"event":"transcript","entityId":N,"packets":[...]} with every
// packet received after Join Game (Keep Alive left out: its timing is not part of the script), each as
// {"name":..., "data":...}, and disconnects. On a kick, an error or the timeout it prints
// {"event":"failed","error":...,"packets":[...]} instead; the exit code is 0 only after the whole script.
// With "online":{"sessionServer":URL,"profile":{"name","id","accessToken"}} it logs in as that profile with
// auth 'mojang' against the session server stand-in (session-server.js) and encrypts its stream.
const mc = require('minecraft-protocol')
const { authOptions, emit } = require('./common')

const opts = Object.assign({ host: '127.0.0.1', username: 'Mover', serverHost: 'mc.example.com', steps: [], timeoutMs: 30000 },
  JSON.parse(process.argv[2] || '{}'))

const profile = opts.online ? opts.online.profile : null
const auth = authOptions(profile, opts.online && opts.online.sessionServer)
const client = mc.createClient(Object.assign({ host: opts.host, port: opts.port, username: profile ? profile.name : opts.username, version: '1.7.10', fakeHost: opts.serverHost }, auth))
const packets = []
let entityId = null
let step = -1
let seen = 0
let done = false

function finish (event, extra) {
  if (done) return
  done = true
  emit(Object.assign({ event, entityId, packets }, extra))
  client.end()
  process.exit(event === 'transcript' ? 0 : 1)
}

function nextStep () {
  step++
  seen = 0
  if (step === opts.steps.length) return finish('transcript')
  client.write('chat', { message: opts.steps[step].say })
}

client.on('packet', (data, meta) => {
  if (meta.state !== 'play') return
  if (meta.name === 'login') {
    if (entityId === null) {
      entityId = data.entityId
      setImmediate(nextStep)
      return
    }
  }
  if (entityId === null || meta.name === 'keep_alive') return
  packets.push({ name: meta.name, data })
  const s = opts.steps[step]
  if (s && meta.name === s.until && ++seen === (s.count || 1)) setImmediate(nextStep)
})
client.on('kick_disconnect', (p) => finish('failed', { error: 'kicked: ' + p.reason }))
client.on('error', (e) => finish('failed', { error: String(e) }))
client.on('end', (reason) => finish('failed', { error: 'connection ended: ' + reason }))
setTimeout(() => finish('failed', { error: 'timeout at step ' + step }), opts.timeoutMs)
