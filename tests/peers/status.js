'use strict'
// Server-list status ping with node-minecraft-protocol: node status.js '{"host":"127.0.0.1","port":N}'
// Prints {"event":"status","response":{...}} or {"event":"error",...} (exit 1).
const mc = require('minecraft-protocol')
const { emit } = require('./common')
const opts = JSON.parse(process.argv[2] || '{}')
mc.ping({ host: opts.host || '127.0.0.1', port: opts.port, version: '1.7.10', closeTimeout: 10000 }, (err, res) => {
  if (err) { emit({ event: 'error', error: String(err) }); process.exit(1) }
  emit({ event: 'status', response: res })
  process.exit(0)
})
