'use strict'
// Shared by the peer scripts: the deterministic login-burst payload and JSON-line output.

// Byte i of burst message n (0-based): a pattern that differs per message and per offset, so a reordered,
// truncated or duplicated message is caught byte for byte.
function burstPayload (n, size) {
  const buf = Buffer.alloc(size)
  for (let i = 0; i < size; i++) buf[i] = (n * 131 + i * 7 + (i >> 8)) & 0xff
  return buf
}

function emit (obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

// node-minecraft-protocol client options for logging in as `profile` ({name, id, accessToken}) with auth
// 'mojang' against `sessionServer` (the stand-in of session-server.js), or offline without a profile.
function authOptions (profile, sessionServer) {
  if (!profile) return { auth: 'offline' }
  return {
    auth: 'mojang',
    sessionServer,
    session: { accessToken: profile.accessToken, clientToken: 'moonbridge-tests', selectedProfile: { id: profile.id, name: profile.name } },
    skipValidation: true,
    profilesFolder: false
  }
}

module.exports = { authOptions, burstPayload, emit, BURST_CHANNEL: 'MB|Burst' }
