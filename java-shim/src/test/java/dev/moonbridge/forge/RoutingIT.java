package dev.moonbridge.forge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moonbridge.client.Discovery;
import dev.moonbridge.client.DnsServer;
import dev.moonbridge.client.Routes;
import dev.moonbridge.client.TestPeers;
import dev.moonbridge.client.netty.MoonBridgeChannel;
import dev.moonbridge.client.netty.NoDelayNioSocketChannel;
import io.netty.channel.Channel;
import io.netty.channel.ChannelOption;
import java.lang.reflect.Method;
import java.net.InetAddress;
import java.util.Arrays;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Where the patched game sends a player, end to end: the transformed 1.7.10 fixtures (ServerAddress with its
 * JNDI SRV lookup, GuiConnecting, OldServerPinger, NetworkManager) on a real Netty 4.0.10 pipeline, a real DNS
 * server on loopback (dnsmasq), the real proxy and a node-minecraft-protocol 1.7.10 backend. Cases C25 and C26,
 * route discovery, and the server-list ping time.
 *
 * <p>The Failsafe JVM runs as Forge runs the game, with {@code java.net.preferIPv4Stack=true}, and resolves names
 * from {@code src/test/resources/hosts} ({@code jdk.net.hosts.file}), where the SRV target
 * {@code play.example.net} is 127.0.0.1.
 */
@Timeout(value = 180, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class RoutingIT {
    static TestPeers peers;
    static DnsServer dns;

    @BeforeAll
    static void start() throws Exception {
        System.setProperty("org.apache.logging.log4j.simplelog.level", "INFO");
        peers = TestPeers.start("{\"port\":0}");
        String srvTarget = ",play.example.net," + peers.tcpPort;
        dns = DnsServer.start(
                "--srv-host=_minecraft._tcp.mc.example.com" + srvTarget,
                "--srv-host=_minecraft._tcp.routed.example.com" + srvTarget,
                "--txt-record=_moonbridge.found.example.com," + peers.wssUrl(),
                "--srv-host=_minecraft._tcp.found.example.com" + srvTarget,
                "--txt-record=_moonbridge.junk.example.com,v=spf1 -all",
                "--srv-host=_minecraft._tcp.junk.example.com" + srvTarget);
        System.setProperty("moonbridge.test.dns", dns.jndiUrl());
        System.setProperty(Discovery.RESOLVER_PROPERTY, dns.address());
    }

    @AfterAll
    static void stop() {
        if (dns != null) {
            dns.close();
        }
        if (peers != null) {
            peers.close();
        }
    }

    @BeforeEach
    void clear() {
        Routes.clear();
        Routes.setDefaultOptions(peers.caOptions());
        Discovery.configure(true, Discovery.DEFAULT_TIMEOUT_MS);
    }

    /** What a GuiConnecting run did. */
    static final class Joined {
        InetAddress resolved;
        String handshakeHost;
        int handshakePort;
        Channel channel;
    }

    /** Runs the game's connect flow for {@code typed} and waits for Login Success from the backend. */
    static Joined join(String typed) throws Exception {
        ClassLoader loader = new TransformingLoader(true);
        Object g = MoonBridgeTransformerTest.connect(loader, typed);
        Object error = MoonBridgeTransformerTest.field(g, "error");
        assertNull(error, "connect " + typed + ": " + error);
        Object manager = g.getClass().getMethod("manager").invoke(g);
        @SuppressWarnings("unchecked")
        BlockingQueue<Integer> ids = (BlockingQueue<Integer>) MoonBridgeTransformerTest.field(manager, "receivedIds");
        Integer first = ids.poll(20, TimeUnit.SECONDS);
        assertEquals(Integer.valueOf(0x02), first, "Login Success for " + typed);
        Joined j = new Joined();
        j.resolved = (InetAddress) MoonBridgeTransformerTest.field(g, "resolved");
        j.handshakeHost = (String) MoonBridgeTransformerTest.field(g, "handshakeHost");
        j.handshakePort = (Integer) MoonBridgeTransformerTest.field(g, "handshakePort");
        j.channel = (Channel) MoonBridgeTransformerTest.field(manager, "channel");
        return j;
    }

    static String[] parse(ClassLoader loader, String typed) throws Exception {
        Class<?> sa = loader.loadClass(MoonBridgeTransformer.SERVER_ADDRESS);
        Object a = sa.getMethod("func_78860_a", String.class).invoke(null, typed);
        return new String[] {(String) sa.getMethod("func_78861_a").invoke(a), String.valueOf(sa.getMethod("func_78864_b").invoke(a))};
    }

    @Test
    void c26WithoutARouteTheSrvRecordIsFollowedExactlyAsVanillaDoes() throws Exception {
        String[] vanilla = parse(new TransformingLoader(false), "mc.example.com");
        assertEquals(Arrays.asList("play.example.net.", String.valueOf(peers.tcpPort)), Arrays.asList(vanilla));
        int txtBefore = dns.queries("TXT", "_moonbridge.mc.example.com");
        Joined j = join("mc.example.com");
        assertEquals("play.example.net.", j.handshakeHost, "the handshake host vanilla sends");
        assertEquals(peers.tcpPort, j.handshakePort);
        assertEquals(InetAddress.getByName("127.0.0.1"), j.resolved);
        assertSame(NoDelayNioSocketChannel.class, j.channel.getClass());
        assertEquals(Boolean.TRUE, j.channel.config().getOption(ChannelOption.TCP_NODELAY));
        assertTrue(peers.waitBackendLine("\"serverHost\":\"play.example.net.\"", 20).contains("\"event\":\"login\""));
        assertEquals(txtBefore + 1, dns.queries("TXT", "_moonbridge.mc.example.com"), "discovery asked, found nothing");
        j.channel.close().syncUninterruptibly();
    }

    @Test
    void c26ARoutedHostSkipsSrvAndTheRouteDecides() throws Exception {
        Routes.putConfig("routed.example.com", -1, peers.wssUrl());
        Joined j = join("routed.example.com");
        assertEquals("routed.example.com", j.handshakeHost);
        assertEquals(25565, j.handshakePort);
        assertTrue(Routes.isPlaceholder(j.resolved), j.resolved.toString());
        assertSame(MoonBridgeChannel.class, j.channel.getClass());
        assertEquals(peers.wssUrl(), ((MoonBridgeChannel) j.channel).route().url);
        assertTrue(peers.waitBackendLine("\"serverHost\":\"routed.example.com\"", 20).contains("\"event\":\"login\""));
        assertEquals(0, dns.queries("SRV", "_minecraft._tcp.routed.example.com"), "the SRV answer is not used");
        assertEquals(0, dns.queries("TXT", "_moonbridge.routed.example.com"), "config routes win over discovery");
        j.channel.close().syncUninterruptibly();
    }

    @Test
    void discoveryAPlayerTypingTheUsualAddressReachesTheProxyOverWss() throws Exception {
        Joined j = join("found.example.com");
        assertEquals("found.example.com", j.handshakeHost);
        assertSame(MoonBridgeChannel.class, j.channel.getClass());
        Routes.Route r = ((MoonBridgeChannel) j.channel).route();
        assertEquals(peers.wssUrl(), r.url);
        assertEquals(Routes.Route.Source.DISCOVERED, r.source);
        assertTrue(peers.waitBackendLine("\"serverHost\":\"found.example.com\"", 20).contains("\"event\":\"login\""));
        assertEquals(0, dns.queries("SRV", "_minecraft._tcp.found.example.com"), "a record wins over SRV");
        j.channel.close().syncUninterruptibly();
        // A config route for the same host wins over the record.
        Routes.putConfig("found.example.com", -1, peers.wsUrl());
        Joined k = join("found.example.com");
        assertEquals(peers.wsUrl(), ((MoonBridgeChannel) k.channel).route().url);
        k.channel.close().syncUninterruptibly();
    }

    @Test
    void discoveryIgnoresARecordThatIsNotAUrlAndDiscoveryOffIsVanilla() throws Exception {
        Joined j = join("junk.example.com");
        assertSame(NoDelayNioSocketChannel.class, j.channel.getClass());
        assertEquals("play.example.net.", j.handshakeHost);
        j.channel.close().syncUninterruptibly();
        Discovery.configure(false, Discovery.DEFAULT_TIMEOUT_MS);
        int before = dns.queries("TXT", "_moonbridge.found.example.com");
        Joined k = join("found.example.com");
        assertSame(NoDelayNioSocketChannel.class, k.channel.getClass(), "discovery off: vanilla SRV");
        assertEquals(before, dns.queries("TXT", "_moonbridge.found.example.com"));
        k.channel.close().syncUninterruptibly();
    }

    @Test
    void c25Ipv6UrlsAndRoutesConnectAlthoughForgePrefersIpv4() throws Exception {
        assertEquals("true", System.getProperty("java.net.preferIPv4Stack"), "Forge's setting, as in the game");
        Joined typed = join(peers.ws6Url());
        assertEquals("::1", typed.handshakeHost, "vanilla parsing got the bracketed form");
        assertEquals(peers.ws6Port, typed.handshakePort);
        assertEquals(peers.ws6Url(), ((MoonBridgeChannel) typed.channel).route().url);
        typed.channel.close().syncUninterruptibly();
        Routes.putConfig("mc6.example.com", -1, peers.ws6Url());
        Joined routed = join("mc6.example.com:25570");
        assertEquals("mc6.example.com", routed.handshakeHost);
        assertEquals(peers.ws6Url(), ((MoonBridgeChannel) routed.channel).route().url);
        assertTrue(peers.waitBackendLine("\"serverHost\":\"mc6.example.com\"", 20).contains("\"event\":\"login\""));
        routed.channel.close().syncUninterruptibly();
    }

    /** The ping time the server list shows for {@code typed}, in nanoseconds (one ping). */
    static long ping(ClassLoader loader, String typed) throws Exception {
        Class<?> pinger = loader.loadClass(MoonBridgeTransformer.OLD_SERVER_PINGER);
        Object p = pinger.getConstructor().newInstance();
        Object data = MoonBridgeTransformerTest.serverData(loader, typed);
        Method m = pinger.getMethod("func_147224_a", data.getClass());
        m.invoke(p, data);
        CountDownLatch finished = (CountDownLatch) pinger.getField("finished").get(p);
        assertTrue(finished.await(20, TimeUnit.SECONDS), "status of " + typed);
        long nanos = (Long) data.getClass().getField("pingNanos").get(data);
        assertTrue(nanos > 0, "a pong for " + typed);
        assertNotNull(data.getClass().getField("field_78843_d").get(data), "a status answer");
        return nanos;
    }

    static long median(long[] v) {
        long[] c = v.clone();
        Arrays.sort(c);
        return c[c.length / 2];
    }

    @Test
    void aServerListPingThroughMoonBridgeReadsLikeOneOverTcp() throws Exception {
        ClassLoader loader = new TransformingLoader(true);
        String viaMoonBridge = peers.wsUrl();
        String viaTcp = "127.0.0.1:" + peers.tcpPort;
        for (int i = 0; i < 3; i++) {
            ping(loader, viaMoonBridge);
            ping(loader, viaTcp);
        }
        long[] mb = new long[20];
        long[] tcp = new long[20];
        for (int i = 0; i < 20; i++) {
            mb[i] = ping(loader, viaMoonBridge);
            tcp[i] = ping(loader, viaTcp);
        }
        double mbMs = median(mb) / 1e6;
        double tcpMs = median(tcp) / 1e6;
        System.out.printf("server-list ping, median of 20: MoonBridge ws %.3f ms, TCP %.3f ms%n", mbMs, tcpMs);
        assertTrue(Math.abs(mbMs - tcpMs) <= 5.0, "MoonBridge " + mbMs + " ms vs TCP " + tcpMs + " ms");
        assertFalse(mbMs > 20, "no tick wait in the ping: " + mbMs);
    }
}
