package dev.moonbridge.forge;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moonbridge.client.Discovery;
import dev.moonbridge.client.Routes;
import dev.moonbridge.client.netty.MoonBridgeChannel;
import dev.moonbridge.client.netty.NoDelayNioSocketChannel;
import java.io.File;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class MoonBridgeHooksTest {
    @BeforeEach
    void clear() {
        Routes.clear();
    }

    @Test
    void badUrlsAreLeftForTheGameToReport() {
        assertEquals("wss://", MoonBridgeHooks.rewriteServerAddress("wss://"));
        assertEquals("ws://h:notaport/x", MoonBridgeHooks.rewriteServerAddress("ws://h:notaport/x"));
        assertEquals("ws://[::1/x", MoonBridgeHooks.rewriteServerAddress("ws://[::1/x"));
        // An unbracketed IPv6 host is ambiguous: never guessed.
        assertEquals("ws://::1:8080/mc", MoonBridgeHooks.rewriteServerAddress("ws://::1:8080/mc"));
        assertNull(MoonBridgeHooks.rewriteServerAddress(null));
        assertEquals("plain.example.com", MoonBridgeHooks.rewriteServerAddress("plain.example.com"));
        assertNull(Routes.intent());
    }

    @Test
    void aTypedUrlIsThisThreadsIntentAndAPlainAddressClearsIt() {
        assertEquals("mc.example.com:443", MoonBridgeHooks.rewriteServerAddress("wss://mc.example.com/mc"));
        Routes.Intent i = Routes.intent();
        assertEquals("mc.example.com", i.host);
        assertEquals(443, i.port);
        assertEquals("wss://mc.example.com/mc", i.route.url);
        assertEquals(Routes.Route.Source.TYPED, i.route.source);
        assertEquals("wss://mc.example.com/mc", Routes.find("MC.example.com.", 443).url);
        assertNull(Routes.find("mc.example.com", 25565), "another port is another server");
        // The next address parsed on this thread replaces it: a plain entry for the same host stays plain.
        assertEquals("mc.example.com", MoonBridgeHooks.rewriteServerAddress("mc.example.com"));
        assertNull(Routes.intent());
        assertNull(Routes.find("mc.example.com", 443));
    }

    @Test
    void launchFlagsGlueAPortOntoTheUrl() {
        // FML's connectToServerAtStartup builds host + ":" + port from --server and --port (25565 by default).
        assertEquals("h.example.com:443", MoonBridgeHooks.rewriteServerAddress("wss://h.example.com/mc:25565"));
        assertEquals("wss://h.example.com/mc", Routes.intent().route.url);
        assertEquals("h.example.com:8080", MoonBridgeHooks.rewriteServerAddress("ws://h.example.com:8080:25565"));
        assertEquals("ws://h.example.com:8080/", Routes.intent().route.url);
        assertEquals("h.example.com:443", MoonBridgeHooks.rewriteServerAddress("wss://h.example.com:25565"));
        assertEquals("wss://h.example.com/", Routes.intent().route.url);
        // A port given with --port is used when the URL has none; the URL's own port always wins.
        assertEquals("h.example.com:8443", MoonBridgeHooks.rewriteServerAddress("wss://h.example.com/mc:8443"));
        assertEquals("wss://h.example.com:8443/mc", Routes.intent().route.url);
        assertEquals("h.example.com:9000", MoonBridgeHooks.rewriteServerAddress("wss://h.example.com:9000/mc:8443"));
        assertEquals("wss://h.example.com:9000/mc", Routes.intent().route.url);
        assertEquals("[::1]:8080", MoonBridgeHooks.rewriteServerAddress("ws://[::1]:8080/mc:25565"));
        assertEquals("ws://[::1]:8080/mc", Routes.intent().route.url);
        // A URL without the glued port is taken as it is.
        assertEquals("h.example.com:8080", MoonBridgeHooks.rewriteServerAddress("ws://h.example.com:8080"));
        assertEquals("ws://h.example.com:8080/", Routes.intent().route.url);
    }

    @Test
    void ipv6UrlsReachTheGameBracketed() {
        assertEquals("[::1]:8080", MoonBridgeHooks.rewriteServerAddress("ws://[::1]:8080/mc"));
        assertEquals("::1", Routes.intent().host);
        assertEquals("ws://[::1]:8080/mc", Routes.intent().route.url);
        // What vanilla's parser makes of the rewritten address: the host without brackets, the port apart.
        assertArrayEquals(new String[] {"::1", "8080"}, MoonBridgeHooks.vanillaSplit("[::1]:8080"));
        assertEquals("[2001:db8::1]:443", MoonBridgeHooks.rewriteServerAddress("wss://[2001:db8::1]/mc"));
    }

    @Test
    void placeholdersAreUniqueUnroutableAndCarryTheirRoute() throws Exception {
        Routes.setIntent("a.example.com", 443, "wss://a.example.com/survival", Routes.Route.Source.TYPED);
        Routes.Intent survival = Routes.intent();
        Set<String> seen = new HashSet<String>();
        for (int i = 0; i < 1000; i++) {
            InetAddress p = Routes.placeholder("a.example.com", 443, survival.route);
            byte[] b = p.getAddress();
            assertEquals(0, b[0], "in 0.0.0.0/8");
            assertFalse(b[1] == 0 && b[2] == 0 && b[3] == 0, "never 0.0.0.0 (this host)");
            assertTrue(seen.add(p.getHostAddress()), "unique per attempt");
            assertTrue(Routes.isPlaceholder(p));
            assertEquals("a.example.com", Routes.hostOf(p));
        }
        InetAddress s = Routes.placeholder("a.example.com", 443, survival.route);
        Routes.setIntent("a.example.com", 443, "wss://a.example.com/creative", Routes.Route.Source.TYPED);
        InetAddress c = Routes.placeholder("a.example.com", 443, Routes.intent().route);
        assertEquals("wss://a.example.com/survival", Routes.forAddress(s, 443).url);
        assertEquals("wss://a.example.com/creative", Routes.forAddress(c, 443).url);
        assertFalse(Routes.isPlaceholder(InetAddress.getByName("127.0.0.1")));
        assertFalse(Routes.isPlaceholder(InetAddress.getByAddress(new byte[4])));
    }

    @Test
    void channelClassFollowsTheRoutes() throws Exception {
        Routes.setIntent("play.example.com", 25565, "wss://cdn.example.com/mc", Routes.Route.Source.TYPED);
        InetAddress placeholder = MoonBridgeHooks.resolve("play.example.com", PatchedNetworkManager.class);
        assertTrue(Routes.isPlaceholder(placeholder));
        assertSame(MoonBridgeChannel.class, MoonBridgeHooks.channelClass(placeholder, 25565));
        assertSame(NoDelayNioSocketChannel.class, MoonBridgeHooks.channelClass(InetAddress.getByName("127.0.0.1"), 25565));
        assertSame(NoDelayNioSocketChannel.class, MoonBridgeHooks.channelClass(null, 25565));
        // A config route applies by host name, whatever thread connects.
        Routes.putConfig("routed.example.com", -1, "wss://cdn.example.com/mc");
        InetAddress named = InetAddress.getByAddress("routed.example.com", new byte[] {127, 0, 0, 1});
        assertSame(MoonBridgeChannel.class, MoonBridgeHooks.channelClass(named, 1234));
        assertNull(Routes.hostOf(InetAddress.getByAddress(new byte[] {127, 0, 0, 1})), "no reverse lookup");
    }

    /** Stands for a NetworkManager the transformer patched (it carries the marker field). */
    static final class PatchedNetworkManager {
        public static final boolean moonbridge$channelPatch = true;
    }

    @Test
    void aPlainChannelResolvesAPlaceholderInsteadOfConnectingToIt() throws Exception {
        InetAddress p = Routes.placeholder("127.0.0.2", 25565, null);
        InetSocketAddress real = (InetSocketAddress) NoDelayNioSocketChannel.realAddress(new InetSocketAddress(p, 25565));
        assertEquals(InetAddress.getByName("127.0.0.2"), real.getAddress(), "the host the placeholder names");
        assertEquals(25565, real.getPort());
        // Addresses MoonBridge did not make are left alone, a typed 0.x.y.z among them (never "localhost").
        InetSocketAddress plain = new InetSocketAddress(InetAddress.getByName("127.0.0.1"), 1);
        assertSame(plain, NoDelayNioSocketChannel.realAddress(plain));
        InetSocketAddress typed = new InetSocketAddress(InetAddress.getByAddress(new byte[] {0, 1, 2, 3}), 1);
        assertSame(typed, NoDelayNioSocketChannel.realAddress(typed));
    }

    @Test
    void aRoutedHostThatResolvesKeepsItsRealAddressBoundToTheRoute() throws Exception {
        Routes.setIntent("localhost", 443, "wss://localhost/survival", Routes.Route.Source.TYPED);
        InetAddress a = MoonBridgeHooks.resolve("localhost", PatchedNetworkManager.class);
        assertTrue(a.isLoopbackAddress(), "should anything bypass MoonBridge, it reaches the host meant: " + a);
        assertEquals("localhost", Routes.hostOf(a));
        assertEquals("wss://localhost/survival", Routes.forAddress(a, 443).url);
        assertNull(Routes.intent(), "the intent is used once");
        // Another object for the same address is not bound: routes travel with the object the game got.
        assertNull(Routes.forAddress(InetAddress.getByAddress("localhost", a.getAddress()), 443));
        // The game's network threads never look at intents: a stale one cannot route them.
        Routes.setIntent("localhost", 443, "wss://localhost/creative", Routes.Route.Source.TYPED);
        assertNull(Routes.forAddress(InetAddress.getByAddress("localhost", a.getAddress()), 443));
    }

    @Test
    void typedUrlsWithAQueryButNoPath() {
        assertEquals("h.example.com:443", MoonBridgeHooks.rewriteServerAddress("wss://h.example.com?token=1"));
        assertEquals("wss://h.example.com/?token=1", Routes.intent().route.url);
        assertEquals("h.example.com:8443", MoonBridgeHooks.rewriteServerAddress("wss://h.example.com:8443?t=2"));
        assertEquals("wss://h.example.com:8443/?t=2", Routes.intent().route.url);
    }

    @Test
    void configureLoadsRoutesOptionsAndDiscovery(@TempDir File dir) throws Exception {
        File cfg = new File(dir, "config/moonbridge.cfg");
        MoonBridgeHooks.configure(cfg);
        assertTrue(cfg.isFile(), "defaults written on first start");
        String written = new String(Files.readAllBytes(cfg.toPath()), StandardCharsets.UTF_8);
        assertTrue(written.contains("routes {") && written.contains("discovery {"), written);
        assertTrue(Discovery.enabled());
        Files.write(cfg.toPath(), ("routes {\n  mc.example.com:25565 = wss://edge.example.com/mc\n}\n"
                + "options {\n  coalesce = off\n  ping_interval_ms = 20000\n}\n"
                + "discovery {\n  enabled = false\n}\n").getBytes(StandardCharsets.UTF_8));
        MoonBridgeHooks.configure(cfg);
        assertEquals("wss://edge.example.com/mc", Routes.find("MC.example.com.", 25565).url);
        assertEquals(Routes.Route.Source.CONFIG, Routes.find("mc.example.com", 25565).source);
        assertNull(Routes.find("mc.example.com", 25566));
        assertEquals("{\"coalesce\":\"off\",\"ping_interval_ms\":20000}", Routes.defaultOptions());
        assertFalse(Discovery.enabled()); // RoutingIT shows that no lookup happens then
        Discovery.configure(true, Discovery.DEFAULT_TIMEOUT_MS);
    }

    @Test
    void aConfigRouteForAPlainAddressBecomesTheIntent() {
        Routes.putConfig("mc.example.com", 25566, "wss://edge.example.com/mc");
        assertEquals("mc.example.com:25566", MoonBridgeHooks.rewriteServerAddress("mc.example.com:25566"));
        assertEquals("wss://edge.example.com/mc", Routes.intent().route.url);
        assertEquals("mc.example.com:25567", MoonBridgeHooks.rewriteServerAddress("mc.example.com:25567"));
        assertNull(Routes.intent(), "the route has another port: vanilla");
        assertNotEquals(null, Routes.config("mc.example.com", 25566));
    }
}
