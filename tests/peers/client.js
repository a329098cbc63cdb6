'use strict'
// Real node-minecraft-protocol 1.7.10 clients connecting through MoonBridge.
//
// Usage: node client.js '{"host":"127.0.0.1","port":N,"count":50,"serverHost":"mc.example.com","forge":true,
//                         "burstCount":70,"burstSize":30000,"timeoutMs":60000,"url":"ws://...",
//                         "online":{"sessionServer":"http://127.0.0.1:M","profiles":[{"name","id","accessToken"}]}}'
// With `online`, client i logs in as profiles[i] with auth 'mojang': it joins the session server (the local
// stand-in, see session-server.js) and encrypts its stream, as a real online-mode client does.
// Each client logs in (Forge marker in the handshake when forge is set), waits for Join Game, checks every byte
// of the plugin-message burst, completes a chat round trip and disconnects. One JSON line per client, then a
// summary line {"event":"done","ok":N,"failed":M,"ms":T}; the exit code is 0 only when every client passed.
const mc = require('minecraft-protocol')
const { authOptions, burstPayload, emit, BURST_CHANNEL } = require('./common')

const opts = Object.assign({ host: '127.0.0.1', count: 1, serverHost: 'mc.example.com', forge: false,
  burstCount: 70, burstSize: 30000, timeoutMs: 60000, prefix: 'Player' }, JSON.parse(process.argv[2] || '{}'))

// With `url`, the Minecraft stream runs over a WebSocket (the npm ws package), one binary message per write.
// node-minecraft-protocol emits 'connect' synchronously for a ready-made stream in offline mode, before its
// handshake listener exists, so the connection is handed over through the `connect` option instead and
// 'connect' is emitted once the WebSocket is open.
function wsConnect (opts, result) {
  if (!opts.url) return undefined
  const WebSocket = require('ws')
  return (client) => {
    const wsOpts = { perMessageDeflate: false }
    if (opts.ca) wsOpts.ca = require('fs').readFileSync(opts.ca)
    if (opts.servername) wsOpts.servername = opts.servername
    const ws = new WebSocket(opts.url, opts.subprotocol ? [opts.subprotocol] : [], wsOpts)
    ws.on('upgrade', (res) => { result.subprotocol = res.headers['sec-websocket-protocol'] || null })
    ws.on('close', (code) => { result.closeCode = code })
    client.setSocket(WebSocket.createWebSocketStream(ws))
    ws.once('open', () => client.emit('connect'))
  }
}

function runOne (i) {
  return new Promise((resolve) => {
    const profile = opts.online ? opts.online.profiles[i] : null
    const username = profile ? profile.name : opts.prefix + i
    const started = Date.now()
    const result = { event: 'client', username, ok: false, joined: false, burst: 0, chat: false }
    const forge = opts.forge === 'alternate' ? i % 2 === 0 : Boolean(opts.forge)
    result.forge = forge
    const host = opts.serverHost + (forge ? '\0FML\0' : '')
    const auth = authOptions(profile, opts.online && opts.online.sessionServer)
    const client = mc.createClient(Object.assign({
      host: opts.host, port: opts.port, username, version: '1.7.10', fakeHost: host,
      connect: wsConnect(opts, result), keepAlive: true
    }, auth))
    let finished = false
    const finish = (err) => {
      if (finished) return
      finished = true
      clearTimeout(timer)
      if (err) result.error = String(err)
      result.ms = Date.now() - started
      emit(result)
      client.end()
      resolve(result.ok)
    }
    const timer = setTimeout(() => finish(new Error('timeout: ' + JSON.stringify(result))), opts.timeoutMs)
    client.on('login', () => { result.joined = true })
    client.on('custom_payload', (p) => {
      if (p.channel !== BURST_CHANNEL) return
      const want = burstPayload(result.burst, opts.burstSize)
      if (!want.equals(p.data)) return finish(new Error('burst message ' + result.burst + ' differs'))
      result.burst++
      if (result.burst === opts.burstCount) client.write('chat', { message: 'hello from ' + username })
    })
    client.on('chat', (p) => {
      const text = JSON.parse(p.message).text
      if (text !== 'echo:hello from ' + username) return finish(new Error('unexpected chat ' + text))
      result.chat = true
      result.ok = result.joined && result.burst === opts.burstCount
      finish(result.ok ? null : new Error('chat before burst complete'))
    })
    client.on('kick_disconnect', (p) => finish(new Error('kicked: ' + p.reason)))
    client.on('disconnect', (p) => finish(new Error('disconnected: ' + p.reason)))
    client.on('error', (e) => finish(e))
    client.on('end', (reason) => finish(new Error('connection ended: ' + reason)))
  })
}

const t0 = Date.now()
Promise.all(Array.from({ length: opts.count }, (_, i) => runOne(i))).then((oks) => {
  const ok = oks.filter(Boolean).length
  emit({ event: 'done', ok, failed: oks.length - ok, ms: Date.now() - t0 })
  process.exit(ok === oks.length ? 0 : 1)
})
