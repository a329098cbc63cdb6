package dev.moonbridge.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A real JVM logs in over wss through NativeTransport, with the native library extracted by NativeLoader from
 * the built jar (Failsafe runs these tests against the jar), through the real moonbridge proxy to a real
 * node-minecraft-protocol 1.7.10 backend.
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
    void errorsBecomeIOExceptionsWithTheReason() {
        IOException bad = assertThrows(IOException.class, () -> NativeTransport.open("http://x/mc", null));
        assertTrue(bad.getMessage().contains("invalid URL"), bad.getMessage());
        IOException tls = assertThrows(IOException.class, () -> NativeTransport.open(peers.wssUrl(), null));
        assertTrue(tls.getMessage().contains("unknown issuer"), tls.getMessage());
        IOException opts = assertThrows(IOException.class, () -> NativeTransport.open(peers.wssUrl(), "{\"nope\":1}"));
        assertTrue(opts.getMessage().contains("nope"), opts.getMessage());
    }

    @Test
    void closedTransportRefusesUse() throws Exception {
        NativeTransport t = NativeTransport.open(peers.wssUrl(), "{\"ca_file\":" + Mc.json(peers.ca.toString()) + "}");
        t.close();
        t.close(); // idempotent
        assertThrows(IOException.class, () -> t.write(ByteBuffer.wrap(new byte[] {1})));
        assertThrows(IOException.class, t::endTick);
    }

    /** Asserts a class was loaded from a jar file. */
    static final class URLCheck {
        static void assertInsideJar(Class<?> c) {
            String where = c.getProtectionDomain().getCodeSource().getLocation().getPath();
            assertTrue(where.endsWith(".jar"), "loaded from " + where);
        }
    }
}
