package dev.moonbridge.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Base64;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A real JVM logs in over wss through NativeTransport, with the native library extracted by NativeLoader from
 * the built jar (Failsafe runs these tests against the jar), through the real moonbridge proxy to a real
 * node-minecraft-protocol 1.7.10 backend. Errors cross JNI as a {@link MoonBridgeException} of their kind: bad
 * arguments, connect failures (refused, TLS), a peer close code (the real proxy answering 1011 when its game server
 * is down) and a protocol error (a WebSocket server, written here on a raw socket, that sends a text message).
 */
@Timeout(120)
class NativeTransportIT {
    static TestPeers peers;

    @BeforeAll
    static void start() throws Exception {
        peers = TestPeers.start();
    }

    @AfterAll
    static void stop() {
        if (peers != null) {
            peers.close();
        }
    }

    @Test
    void libraryComesFromTheJar() {
        assertEquals(null, System.getProperty(NativeLoader.PATH_PROPERTY));
        assertEquals(ProjectVersion.get(), NativeTransport.nativeVersion(), "the native library and the jar share a version");
        File from = NativeLoader.loadedFrom();
        assertTrue(from.getPath().contains("moonbridge-natives-"), "extracted from the jar: " + from);
        URLCheck.assertInsideJar(NativeLoader.class);
    }

    @Test
    void theManifestNamesTheCoremodAndTheClientSide() throws Exception {
        String jar = NativeLoader.class.getProtectionDomain().getCodeSource().getLocation().getPath();
        try (java.util.jar.JarFile f = new java.util.jar.JarFile(jar)) {
            java.util.jar.Attributes a = f.getManifest().getMainAttributes();
            assertEquals("dev.moonbridge.forge.MoonBridgeCoremod", a.getValue("FMLCorePlugin"));
            assertEquals("true", a.getValue("FMLCorePluginContainsFMLMod"));
            assertEquals("CLIENT", a.getValue("ModSide"), "dedicated servers skip the jar");
            assertEquals(ProjectVersion.get(), a.getValue("Implementation-Version"));
        }
    }

    @Test
    void logsInOverWssAndReceivesTheBurst() throws Exception {
        String options = "{\"ca_file\":" + Mc.json(peers.ca.toString()) + "}";
        try (NativeTransport t = NativeTransport.open(peers.wssUrl(), options)) {
            Mc mc = new Mc(t);
            mc.login("JavaSteve", true);
            Mc.Frame success = mc.next();
            assertEquals(0x02, success.id, "Login Success");
            boolean joined = false;
            int burst = 0;
            String echo = null;
            while (echo == null) {
                Mc.Frame f = mc.next();
                if (f.id == 0x00) {
                    mc.send(0x00, f.body); // Keep Alive: echo the id
                    t.endTick();
                } else if (f.id == 0x01) {
                    joined = true;
                } else if (f.id == 0x3f) {
                    Mc.Reader r = new Mc.Reader(f.body);
                    String channel = r.string();
                    byte[] data = r.i16Bytes();
                    if (!channel.equals("MB|Burst")) {
                        continue;
                    }
                    assertArrayEquals(Mc.burstPayload(burst, 30000), data, "burst message " + burst);
                    burst++;
                    if (burst == 70) {
                        mc.send(0x01, Mc.string("hello from java"));
                        t.endTick();
                    }
                } else if (f.id == 0x02 && burst == 70) {
                    echo = new Mc.Reader(f.body).string();
                }
            }
            assertTrue(joined, "Join Game");
            assertEquals(70, burst);
            assertEquals("{\"text\":\"echo:hello from java\"}", echo);
        }
    }

    /**
     * Carriage v2 (docs/carriage.md): a TCP reset between the library and the proxy in the middle of the 2.1 MB
     * login burst is resumed on a new connection; the game side sees every burst byte once, in order, and the
     * chat after it; the backend sees one login. The library's default {@code moonbridge.v2.zstd} compresses the
     * burst's repeating pattern to about 7 kB on the wire, so the reset falls 3,000 bytes in, inside a compressed
     * message; the resumed connection starts new zstd streams.
     */
    @Test
    void aCutConnectionIsResumedWithoutLosingAByte() throws Exception {
        try (ResetRelay relay = new ResetRelay(peers.wsPort, 3_000)) {
            String url = "ws://127.0.0.1:" + relay.port() + "/mc";
            try (NativeTransport t = NativeTransport.open(url, "{\"ping_interval_ms\":1000}")) {
                Mc mc = new Mc(t);
                mc.login("JavaResumer", false);
                assertEquals(0x02, mc.next().id, "Login Success");
                int burst = 0;
                String echo = null;
                while (echo == null) {
                    Mc.Frame f = mc.next();
                    if (f.id == 0x00) {
                        mc.send(0x00, f.body);
                        t.endTick();
                    } else if (f.id == 0x3f) {
                        Mc.Reader r = new Mc.Reader(f.body);
                        if (!r.string().equals("MB|Burst")) {
                            continue;
                        }
                        assertArrayEquals(Mc.burstPayload(burst, 30000), r.i16Bytes(), "burst message " + burst);
                        burst++;
                        if (burst == 70) {
                            mc.send(0x01, Mc.string("after the cut"));
                            t.endTick();
                        }
                    } else if (f.id == 0x02 && burst == 70) {
                        echo = new Mc.Reader(f.body).string();
                    }
                }
                assertEquals("{\"text\":\"echo:after the cut\"}", echo);
            }
            assertTrue(relay.cut, "the relay cut the connection");
            assertEquals(2, relay.accepted, "one new connection for the resume");
        }
        String login = peers.waitBackendLine("JavaResumer", 10);
        assertTrue(login.contains("\"login\""), login);
        String chat = peers.waitBackendLine("after the cut", 10);
        assertTrue(chat.contains("\"chat\""), chat);
    }

    /**
     * A TCP relay to {@code 127.0.0.1:target} that resets both sockets of its first connection (SO_LINGER 0)
     * once {@code cutAfter} bytes went towards the client; later connections are relayed whole.
     */
    static final class ResetRelay implements AutoCloseable {
        private final ServerSocket server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        private final int target;
        private final long cutAfter;
        volatile boolean cut;
        volatile int accepted;

        ResetRelay(int target, long cutAfter) throws IOException {
            this.target = target;
            this.cutAfter = cutAfter;
            Thread t = new Thread(this::acceptLoop, "reset-relay");
            t.setDaemon(true);
            t.start();
        }

        int port() {
            return server.getLocalPort();
        }

        private void acceptLoop() {
            try {
                while (true) {
                    Socket client = server.accept();
                    Socket upstream = new Socket(InetAddress.getLoopbackAddress(), target);
                    client.setTcpNoDelay(true);
                    upstream.setTcpNoDelay(true);
                    boolean first = accepted++ == 0;
                    pump(client, upstream, -1);
                    pump(upstream, client, first ? cutAfter : -1);
                }
            } catch (IOException closed) {
                // the relay was closed
            }
        }

        private void pump(Socket from, Socket to, long limit) {
            Thread t = new Thread(() -> {
                byte[] buf = new byte[65536];
                long total = 0;
                try {
                    InputStream in = from.getInputStream();
                    OutputStream out = to.getOutputStream();
                    int n;
                    while ((n = in.read(buf)) > 0) {
                        if (limit >= 0 && total + n >= limit) {
                            out.write(buf, 0, (int) (limit - total));
                            out.flush();
                            cut = true;
                            for (Socket s : new Socket[] {from, to}) {
                                s.setSoLinger(true, 0);
                                s.close();
                            }
                            return;
                        }
                        out.write(buf, 0, n);
                        total += n;
                    }
                } catch (IOException e) {
                    // the other pump ended the pair
                }
                try {
                    from.close();
                    to.close();
                } catch (IOException ignored) {
                    // already closed
                }
            }, "reset-relay-pump");
            t.setDaemon(true);
            t.start();
        }

        @Override
        public void close() throws IOException {
            server.close();
        }
    }

    @Test
    void directBuffersWorkToo() throws Exception {
        String options = "{\"ca_file\":" + Mc.json(peers.ca.toString()) + "}";
        try (NativeTransport t = NativeTransport.open(peers.wssUrl(), options)) {
            ByteBuffer out = ByteBuffer.allocateDirect(256);
            out.put(Mc.handshakeAndLogin("Direct", false));
            out.flip();
            t.write(out);
            assertEquals(out.limit(), out.position(), "write advances the position");
            t.endTick();
            ByteBuffer in = ByteBuffer.allocateDirect(1 << 20);
            int n = 0;
            while (n < 3) {
                int r = t.read(in, 10000);
                assertTrue(r > 0, "data within 10 s");
                n += r;
            }
            assertEquals(n, in.position());
            assertEquals(0x02, in.get(1) & 0xff, "Login Success id after its length");
        }
    }

    @Test
    void badArgumentsAreInvalidArgumentExceptions() {
        InvalidArgumentException url =
                assertThrows(InvalidArgumentException.class, () -> NativeTransport.open("http://x/mc", null));
        assertTrue(url.getMessage().contains("invalid URL"), url.getMessage());
        assertEquals(MoonBridgeException.ERR_INVALID_ARGUMENT, url.code());
        InvalidArgumentException options = assertThrows(
                InvalidArgumentException.class, () -> NativeTransport.open(peers.wssUrl(), "{\"nope\":1}"));
        assertTrue(options.getMessage().contains("nope"), options.getMessage());
        assertThrows(InvalidArgumentException.class, () -> NativeTransport.open(null, null));
        assertThrows(InvalidArgumentException.class, () -> NativeTransport.discover("example.com", "not-an-address", 100));
    }

    @Test
    void connectFailuresAreConnectFailedExceptions() throws Exception {
        ConnectFailedException tls =
                assertThrows(ConnectFailedException.class, () -> NativeTransport.open(peers.wssUrl(), null));
        assertTrue(tls.getMessage().contains("unknown issuer"), tls.getMessage());
        assertEquals(MoonBridgeException.ERR_TLS, tls.code());
        int closed = TestPeers.freePort();
        ConnectFailedException refused = assertThrows(
                ConnectFailedException.class, () -> NativeTransport.open("tcp://127.0.0.1:" + closed, null));
        assertTrue(refused.getMessage().contains("refused"), refused.getMessage());
        assertEquals(MoonBridgeException.ERR_CONNECT, refused.code());
    }

    @Test
    void aCloseCodeIsAClosedByPeerExceptionWithTheCode() throws Exception {
        try (TestPeers down = TestPeers.startForBackend(TestPeers.freePort());
                NativeTransport t = NativeTransport.open(down.wsUrl(), null)) {
            t.write(ByteBuffer.wrap(Mc.handshakeAndLogin("Stranded", false)));
            t.endTick();
            ByteBuffer in = ByteBuffer.allocate(1 << 16);
            ClosedByPeerException e = assertThrows(ClosedByPeerException.class, () -> {
                while (t.read(in, 10000) >= 0) {
                    in.clear(); // the proxy may send a Login Disconnect first
                }
            });
            assertEquals(1011, e.closeCode(), e.getMessage());
            assertEquals(MoonBridgeException.ERR_CLOSED, e.code());
            ClosedByPeerException again = assertThrows(ClosedByPeerException.class, t::endTick);
            assertEquals(1011, again.closeCode(), "every later call reports the same end");
        }
    }

    @Test
    void aTextMessageIsAProtocolErrorException() throws Exception {
        try (ServerSocket server = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            CompletableFuture<Void> served = CompletableFuture.runAsync(() -> serveTextMessage(server));
            try (NativeTransport t = NativeTransport.open(
                    "ws://127.0.0.1:" + server.getLocalPort() + "/mc", "{\"subprotocol\":false}")) {
                ProtocolErrorException e = assertThrows(
                        ProtocolErrorException.class, () -> t.read(ByteBuffer.allocate(64), 10000));
                assertTrue(e.getMessage().contains("text message"), e.getMessage());
                assertEquals(MoonBridgeException.ERR_IO, e.code());
            }
            served.get(10, TimeUnit.SECONDS);
        }
    }

    @Test
    void aClosedTransportThrowsClosed() throws Exception {
        NativeTransport t = NativeTransport.open(peers.wssUrl(), peers.caOptions());
        t.close();
        t.close(); // idempotent
        MoonBridgeException write =
                assertThrows(MoonBridgeException.class, () -> t.write(ByteBuffer.wrap(new byte[] {1})));
        assertEquals(MoonBridgeException.ERR_CLOSED, write.code());
        MoonBridgeException tick = assertThrows(MoonBridgeException.class, t::endTick);
        assertSame(MoonBridgeException.class, tick.getClass());
    }

    /** Accepts one WebSocket upgrade (RFC 6455 section 4.2.2), then sends a text message "hi". */
    private static void serveTextMessage(ServerSocket server) {
        try (Socket s = server.accept()) {
            s.setSoTimeout(10000);
            InputStream in = s.getInputStream();
            StringBuilder request = new StringBuilder();
            while (request.indexOf("\r\n\r\n") < 0) {
                int b = in.read();
                if (b < 0) {
                    throw new IOException("EOF in the upgrade request");
                }
                request.append((char) b);
            }
            Matcher key = Pattern.compile("(?i)sec-websocket-key: *(\\S+)").matcher(request);
            if (!key.find()) {
                throw new IOException("no Sec-WebSocket-Key in " + request);
            }
            byte[] sha1 = MessageDigest.getInstance("SHA-1").digest(
                    (key.group(1) + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").getBytes(StandardCharsets.US_ASCII));
            String response = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Accept: " + Base64.getEncoder().encodeToString(sha1) + "\r\n\r\n";
            OutputStream out = s.getOutputStream();
            out.write(response.getBytes(StandardCharsets.US_ASCII));
            out.write(new byte[] {(byte) 0x81, 2, 'h', 'i'}); // FIN + text, unmasked, 2 bytes
            out.flush();
            // Wait for the client's close (or EOF) so the message is read before the socket goes away.
            while (in.read() >= 0) {
                // drain
            }
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    /** Asserts a class was loaded from a jar file. */
    static final class URLCheck {
        static void assertInsideJar(Class<?> c) {
            String where = c.getProtectionDomain().getCodeSource().getLocation().getPath();
            assertTrue(where.endsWith(".jar"), "loaded from " + where);
        }
    }
}
