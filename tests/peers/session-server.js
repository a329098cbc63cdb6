'use strict'
// A local STAND-IN for the Mojang session server (sessionserver.mojang.com), which cannot be reached from the
// test machines. It implements the two calls a 1.7.10 login uses, with the real server-hash check:
//
// - POST /session/minecraft/join {accessToken, selectedProfile, serverId}: the client's call. The access token
//   must belong to the profile; the serverId (the client's server hash) is remembered for that player.
// - GET /session/minecraft/hasJoined?username=…&serverId=…: the proxy's call. 200 with the profile (id, name,
//   signed properties) when that player joined with exactly this server hash, else 204 (not verified).
//
// Usage: node session-server.js '{"profiles":[{"name":"Alice","id":"<32 hex>","accessToken":"…",
//                                  "properties":[{"name":"textures","value":"…","signature":"…"}]}],
//                                  "answerAs":{"id":"…","name":"…"}}'
// `answerAs` (optional) makes every hasJoined answer 200 with that profile, to test a name mismatch.
// `hasJoined` (optional) replaces the hasJoined answer, for the field cases: "noContentJson" (204 with a JSON
// Content-Type and no body), "emptyOk" (200, Content-Length 0), "emptyObject" (200 `{}`), "hang" (never
// answers), "drip" (200 headers, then one body byte per second). `delayMs` (optional) delays every hasJoined
// answer. `mode` can be changed later with POST /control {"hasJoined": …, "delayMs": …}.
// Prints {"event":"listening","port":N}, then one line per call: {"event":"join",…} / {"event":"hasJoined",…}
// (hasJoined lines carry the raw query string as `query` and are printed when the answer goes out; a
// {"event":"hasJoinedReceived"} line is printed when the request arrives, before any delay).
const http = require('http')
const { emit } = require('./common')

const opts = Object.assign({ port: 0, profiles: [] }, JSON.parse(process.argv[2] || '{}'))
const byToken = new Map(opts.profiles.map((p) => [p.accessToken, p]))
const joined = new Map() // name -> server hash

function send (res, status, body) {
  const text = body === undefined ? '' : JSON.stringify(body)
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) })
  res.end(text)
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://stand-in')
  if (req.method === 'POST' && url.pathname === '/session/minecraft/join') {
    let body = ''
    req.on('data', (c) => { body += c })
    req.on('end', () => {
      let j
      try { j = JSON.parse(body) } catch (e) { return send(res, 400, { error: 'BadRequest', errorMessage: String(e) }) }
      const p = byToken.get(j.accessToken)
      const ok = Boolean(p) && p.id === String(j.selectedProfile).replace(/-/g, '')
      emit({ event: 'join', name: p ? p.name : null, serverId: j.serverId, ok })
      if (!ok) return send(res, 403, { error: 'ForbiddenOperationException', errorMessage: 'Invalid token.' })
      joined.set(p.name, j.serverId)
      send(res, 204)
    })
    return
  }
  if (req.method === 'POST' && url.pathname === '/control') {
    let body = ''
    req.on('data', (c) => { body += c })
    req.on('end', () => {
      Object.assign(opts, JSON.parse(body))
      emit({ event: 'control', hasJoined: opts.hasJoined || null, delayMs: opts.delayMs || 0 })
      send(res, 204)
    })
    return
  }
  if (req.method === 'GET' && url.pathname === '/session/minecraft/hasJoined') {
    // On arrival, before any delay: a test can act while the proxy waits for the answer.
    emit({ event: 'hasJoinedReceived' })
    setTimeout(() => hasJoined(req, res, url), opts.delayMs || 0)
    return
  }
  send(res, 404, { error: 'Not Found' })
})

function hasJoined (req, res, url) {
  {
    const name = url.searchParams.get('username')
    const hash = url.searchParams.get('serverId')
    const query = req.url.slice(req.url.indexOf('?') + 1)
    switch (opts.hasJoined) {
      case 'noContentJson':
        emit({ event: 'hasJoined', username: name, serverId: hash, query, ok: false })
        res.writeHead(204, { 'Content-Type': 'application/json' })
        return res.end()
      case 'emptyOk':
        emit({ event: 'hasJoined', username: name, serverId: hash, query, ok: false })
        res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': 0 })
        return res.end()
      case 'emptyObject':
        emit({ event: 'hasJoined', username: name, serverId: hash, query, ok: false })
        return send(res, 200, {})
      case 'hang':
        emit({ event: 'hasJoined', username: name, serverId: hash, query, ok: false })
        return // never answers; the socket stays open
      case 'drip': {
        emit({ event: 'hasJoined', username: name, serverId: hash, query, ok: false })
        res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': 1000 })
        const t = setInterval(() => res.write(' '), 1000)
        res.on('close', () => clearInterval(t))
        return
      }
    }
    if (opts.answerAs) {
      emit({ event: 'hasJoined', username: name, serverId: hash, query, ok: true })
      return send(res, 200, Object.assign({ properties: [] }, opts.answerAs))
    }
    const ok = joined.has(name) && joined.get(name) === hash
    emit({ event: 'hasJoined', username: name, serverId: hash, query, ok })
    if (!ok) return send(res, 204)
    joined.delete(name) // one use per join, as the real server
    const p = opts.profiles.find((x) => x.name === name)
    return send(res, 200, { id: p.id, name: p.name, properties: p.properties || [] })
  }
}

server.listen(opts.port, '127.0.0.1', () => emit({ event: 'listening', port: server.address().port }))
