package dev.moonbridge.forge;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moonbridge.client.NativeLoader;
import dev.moonbridge.client.Routes;
import dev.moonbridge.client.netty.MoonBridgeChannel;
import dev.moonbridge.client.netty.MoonBridgeConnectException;
import dev.moonbridge.client.netty.NoDelayNioSocketChannel;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelOption;
import io.netty.channel.socket.nio.NioSocketChannel;
import java.io.DataInputStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.UnknownHostException;
import java.util.Collections;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The transformer on fixture classes with the names, descriptors and bytecode shape of the 1.7.10 targets:
 * transform, load, and check the behaviour on a real Netty 4.0.10 pipeline. Addresses typed here avoid port
 * 25565, whose SRV lookup needs the tests' DNS server (RoutingIT).
 */
@Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class MoonBridgeTransformerTest {
    static final String SERVER_DATA = "net.minecraft.client.multiplayer.ServerData";
    static final String GUI_CONNECTING = "net.minecraft.client.multiplayer.GuiConnecting";

    @BeforeAll
    static void loadNativeLibrary() {
        String lib = System.getProperty("moonbridge.test.lib");
        assertTrue(lib != null && !lib.isEmpty(), "build.sh passes -Dmoonbridge.test.lib");
        System.setProperty(NativeLoader.PATH_PROPERTY, lib);
    }

    @BeforeEach
    void clearRoutes() {
        Routes.clear();
    }

    static Object invokeStatic(ClassLoader loader, String cls, String method, Class<?>[] types, Object... args)
            throws Exception {
        Method m = loader.loadClass(cls).getMethod(method, types);
        try {
            return m.invoke(null, args);
        } catch (InvocationTargetException e) {
            throw (Exception) e.getCause();
        }
    }

    static Object serverData(ClassLoader loader, String address) throws Exception {
        return loader.loadClass(SERVER_DATA).getConstructor(String.class).newInstance(address);
    }

    /** Runs the game's connect flow (GuiConnecting) for {@code address} and waits for the connector thread. */
    static Object connect(ClassLoader loader, String address) throws Exception {
        Class<?> gui = loader.loadClass(GUI_CONNECTING);
        Object g = gui.getConstructor(loader.loadClass(SERVER_DATA)).newInstance(serverData(loader, address));
        CountDownLatch done = (CountDownLatch) gui.getField("done").get(g);
        assertTrue(done.await(30, TimeUnit.SECONDS), "the connector thread finished");
        return g;
    }

    static Object field(Object o, String name) throws Exception {
        return o.getClass().getField(name).get(o);
    }

    @Test
    void typedUrlsBecomeHostAndPortAndThisThreadsIntent() throws Exception {
        ClassLoader loader = new TransformingLoader(true);
        Class<?> sa = loader.loadClass(MoonBridgeTransformer.SERVER_ADDRESS);
        Method parse = sa.getMethod("func_78860_a", String.class);
        Method ip = sa.getMethod("func_78861_a");
        Method port = sa.getMethod("func_78864_b");

        Object a = parse.invoke(null, "wss://mc.example.com/mc");
        assertEquals("mc.example.com", ip.invoke(a), "the handshake carries the URL's host");
        assertEquals(443, port.invoke(a));
        assertEquals("wss://mc.example.com/mc", Routes.find("mc.example.com", 443).url);

        a = parse.invoke(null, "ws://[2001:db8::7]:8080/play");
        assertEquals("2001:db8::7", ip.invoke(a));
        assertEquals(8080, port.invoke(a));
        assertEquals("ws://[2001:db8::7]:8080/play", Routes.find("2001:db8::7", 8080).url);

        a = parse.invoke(null, "WS://Host.Example:25570");
        assertEquals("Host.Example", ip.invoke(a));
        assertEquals(25570, port.invoke(a));
        assertEquals("WS://Host.Example:25570/", Routes.find("host.example", 25570).url);

        // Launchers' --server URL --port: the glued port is not part of the URL's path.
        a = parse.invoke(null, "wss://mc.example.com/mc:25565");
        assertEquals("mc.example.com", ip.invoke(a));
        assertEquals(443, port.invoke(a));
        assertEquals("wss://mc.example.com/mc", Routes.find("mc.example.com", 443).url);

        // Ordinary addresses are untouched and route nothing.
        a = parse.invoke(null, "mc.example.com:25566");
        assertEquals("mc.example.com", ip.invoke(a));
        assertEquals(25566, port.invoke(a));
        assertNull(Routes.find("mc.example.com", 25566));
        assertNull(Routes.intent());

        // Untransformed, a URL is garbage to the game: that is what the patch is for.
        Object raw = new TransformingLoader(false).loadClass(MoonBridgeTransformer.SERVER_ADDRESS)
                .getMethod("func_78860_a", String.class).invoke(null, "wss://mc.example.com:8443/mc");
        assertEquals("wss://mc.example.com:8443/mc", raw.getClass().getMethod("func_78861_a").invoke(raw));
    }

    @Test
    void routedHostsAreNeverLookedUpAndTheConnectorThreadInheritsTheRoute() throws Exception {
        for (boolean transform : new boolean[] {true, false}) {
            Routes.clear();
            Object g = connect(new TransformingLoader(transform), "wss://moonbridge-route.invalid:1/mc");
            if (transform) {
                InetAddress addr = (InetAddress) field(g, "resolved");
                assertTrue(Routes.isPlaceholder(addr), "a placeholder, no DNS: " + addr);
                assertEquals("moonbridge-route.invalid", Routes.hostOf(addr));
                assertEquals("wss://moonbridge-route.invalid:1/mc", Routes.forAddress(addr, 1).url);
                Throwable e = (Throwable) field(g, "error");
                assertTrue(e instanceof MoonBridgeConnectException, String.valueOf(e));
                assertTrue(e.getMessage().startsWith("MoonBridge cannot reach wss://moonbridge-route.invalid:1/mc"), e.getMessage());
            } else {
                assertTrue(field(g, "error") instanceof UnknownHostException, "the unpatched game would look it up");
            }
        }
        // Unrouted hosts still resolve normally.
        Object g = connect(new TransformingLoader(true), "127.0.0.1:1");
        assertEquals(InetAddress.getByName("127.0.0.1"), field(g, "resolved"));
    }

    @Test
    void aPlainConnectionNeverGoesToThePlayersOwnMachine() throws Exception {
        // The server list holds both wss://127.0.0.2/mc and plain 127.0.0.2:P, and a config route for another
        // port of that host. The plain entry must reach 127.0.0.2:P, never 0.0.0.0:P (the player's own machine,
        // where another server listens on 127.0.0.1:P).
        try (ServerSocket right = new ServerSocket()) {
            right.setSoTimeout(20000);
            right.bind(new InetSocketAddress("127.0.0.2", 0));
            int p = right.getLocalPort();
            try (ServerSocket wrong = new ServerSocket()) {
                wrong.bind(new InetSocketAddress("127.0.0.1", p));
                Routes.putConfig("127.0.0.2", 443, "wss://127.0.0.2/mc");
                ClassLoader loader = new TransformingLoader(true);
                invokeStatic(loader, MoonBridgeTransformer.SERVER_ADDRESS, "func_78860_a", new Class<?>[] {String.class},
                        "wss://127.0.0.2/mc");
                Object g = connect(loader, "127.0.0.2:" + p);
                assertNull(field(g, "error"));
                try (Socket s = right.accept()) {
                    assertEquals(InetAddress.getByName("127.0.0.2"), s.getLocalAddress());
                    DataInputStream in = new DataInputStream(s.getInputStream());
                    byte[] head = new byte[16];
                    in.readFully(head);
                    assertTrue(new String(head, "ISO-8859-1").contains("127.0.0.2"), "the handshake names the host");
                }
                assertFalse(Routes.isPlaceholder((InetAddress) field(g, "resolved")));
                ((Channel) field(g.getClass().getMethod("manager").invoke(g), "channel")).close().syncUninterruptibly();
            }
        }
    }

    @Test
    void placeholdersOnlyWhenTheChannelPatchIsInPlace() throws Exception {
        String nm = MoonBridgeTransformer.NETWORK_MANAGER;
        String url = "wss://moonbridge-route.invalid/mc";
        // The patched game: a placeholder.
        Class<?> patched = new TransformingLoader(true).loadClass(nm);
        Routes.setIntent("moonbridge-route.invalid", 443, url, Routes.Route.Source.TYPED);
        assertTrue(Routes.isPlaceholder(MoonBridgeHooks.resolve("moonbridge-route.invalid", patched)));
        // Another coremod rewrote the channel constant first; a Mixin injected a cancellable callback at the head;
        // the transformer did not run: no marker, so the game stays vanilla (here: an unknown host).
        Class<?>[] unpatched = {
            new TransformingLoader(true, Collections.singletonMap(nm, "fixtures.variants.NetworkManagerRewritten")).loadClass(nm),
            new TransformingLoader(true, Collections.singletonMap(nm, "fixtures.variants.NetworkManagerMixin")).loadClass(nm),
            new TransformingLoader(false).loadClass(nm),
        };
        for (Class<?> c : unpatched) {
            Routes.setIntent("moonbridge-route.invalid", 443, url, Routes.Route.Source.TYPED);
            assertThrows(UnknownHostException.class, () -> MoonBridgeHooks.resolve("moonbridge-route.invalid", c),
                    c.getClassLoader().toString());
        }
        // The Mixin variant is left byte for byte as it was.
        byte[] mixin = TransformingLoader.renamed("fixtures.variants.NetworkManagerMixin", nm, "");
        assertSame(mixin, new MoonBridgeTransformer().transform(nm, nm, mixin));
        // The whole connect flow with the rewritten class: vanilla resolution.
        Object g = connect(new TransformingLoader(true, Collections.singletonMap(nm, "fixtures.variants.NetworkManagerRewritten")),
                url);
        assertTrue(field(g, "error") instanceof UnknownHostException, String.valueOf(field(g, "error")));
    }

    @Test
    void serverListPingsUseTheSameRoutes() throws Exception {
        ClassLoader loader = new TransformingLoader(true);
        Class<?> pinger = loader.loadClass(MoonBridgeTransformer.OLD_SERVER_PINGER);
        Object p = pinger.getConstructor().newInstance();
        Method ping = pinger.getMethod("func_147224_a", loader.loadClass(SERVER_DATA));
        Exception e = assertThrows(Exception.class, () -> {
            try {
                ping.invoke(p, serverData(loader, "wss://list.invalid:1/mc"));
            } catch (InvocationTargetException ite) {
                throw (Exception) ite.getCause();
            }
        });
        assertTrue(e instanceof MoonBridgeConnectException && e.getMessage().contains("wss://list.invalid:1/mc"), e.toString());
        InetAddress addr = (InetAddress) pinger.getField("lastAddress").get(p);
        assertTrue(Routes.isPlaceholder(addr), addr.toString());
        assertEquals(1, pinger.getField("lastPort").get(p));
    }

    @Test
    void parallelPingsOfTwoPathsOnOneHostKeepTheirOwnUrls() throws Exception {
        int dead;
        try (ServerSocket s = new ServerSocket(0)) {
            dead = s.getLocalPort();
        }
        ClassLoader loader = new TransformingLoader(true);
        Class<?> pinger = loader.loadClass(MoonBridgeTransformer.OLD_SERVER_PINGER);
        Method ping = pinger.getMethod("func_147224_a", loader.loadClass(SERVER_DATA));
        for (int round = 0; round < 20; round++) {
            final CountDownLatch start = new CountDownLatch(1);
            final String[] paths = {"/survival", "/creative"};
            final AtomicReference<?>[] errors = {new AtomicReference<Throwable>(), new AtomicReference<Throwable>()};
            Thread[] threads = new Thread[2];
            for (int i = 0; i < 2; i++) {
                final int n = i;
                final String url = "ws://127.0.0.1:" + dead + paths[i];
                threads[i] = new Thread(() -> {
                    try {
                        start.await();
                        ping.invoke(pinger.getConstructor().newInstance(), serverData(loader, url));
                    } catch (InvocationTargetException e) {
                        @SuppressWarnings("unchecked")
                        AtomicReference<Throwable> r = (AtomicReference<Throwable>) errors[n];
                        r.set(e.getCause());
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                });
                threads[i].start();
            }
            start.countDown();
            for (int i = 0; i < 2; i++) {
                threads[i].join(30000);
                Throwable e = (Throwable) errors[i].get();
                assertTrue(e != null && e.getMessage().contains("ws://127.0.0.1:" + dead + paths[i] + ":"),
                        "round " + round + ": " + e);
            }
        }
    }

    @Test
    void theLegacyPingSkipsRoutedEntries() throws Exception {
        try (ServerSocket routed = new ServerSocket(0, 50, InetAddress.getByName("127.0.0.1"));
                ServerSocket plain = new ServerSocket(0, 50, InetAddress.getByName("127.0.0.1"))) {
            routed.setSoTimeout(20000);
            plain.setSoTimeout(20000);
            for (boolean transform : new boolean[] {true, false}) {
                // Without the legacy-ping patch (the mod before this fix): URLs are rewritten, the 1.6 ping is not.
                ClassLoader loader = transform ? new TransformingLoader(true) : new TransformingLoader(true,
                        Collections.<String, String>emptyMap(), Collections.singleton(MoonBridgeTransformer.OLD_SERVER_PINGER));
                Class<?> pinger = loader.loadClass(MoonBridgeTransformer.OLD_SERVER_PINGER);
                Object p = pinger.getConstructor().newInstance();
                Method legacy = pinger.getMethod("legacyPing", loader.loadClass(SERVER_DATA));
                legacy.invoke(p, serverData(loader, "ws://127.0.0.1:" + routed.getLocalPort() + "/mc"));
                ChannelFuture f = (ChannelFuture) pinger.getField("legacyConnect").get(p);
                if (transform) {
                    assertTrue(f.isDone() && !f.isSuccess(), "skipped at once");
                    assertNull(f.channel(), "no socket was opened");
                    assertTrue(f.cause().getMessage().contains("no 1.6 server-list ping"), f.cause().toString());
                } else {
                    try (Socket s = routed.accept()) {
                        assertEquals(0xfe, s.getInputStream().read(), "without the patch the 1.6 ping goes out in plain TCP");
                    }
                    f.channel().close().syncUninterruptibly();
                }
                // Unrouted entries ping as vanilla does.
                legacy.invoke(p, serverData(loader, "127.0.0.1:" + plain.getLocalPort()));
                try (Socket s = plain.accept()) {
                    byte[] head = new byte[3];
                    new DataInputStream(s.getInputStream()).readFully(head);
                    assertArrayEquals(new byte[] {(byte) 0xfe, 0x01, (byte) 0xfa}, head);
                }
                ((ChannelFuture) pinger.getField("legacyConnect").get(p)).channel().close().syncUninterruptibly();
            }
        }
    }

    @Test
    void vanillaConnectionsGetNodelayAndRoutedOnesTheMoonBridgeChannel() throws Exception {
        try (ServerSocket server = new ServerSocket(0)) {
            server.setSoTimeout(20000);
            InetAddress local = InetAddress.getByName("127.0.0.1");
            Class<?>[] sig = {InetAddress.class, int.class};

            // Patched: TCP_NODELAY true, although the game's initializer asks for false.
            ClassLoader loader = new TransformingLoader(true);
            invokeStatic(loader, MoonBridgeTransformer.NETWORK_MANAGER, "func_150726_a", sig, local, server.getLocalPort());
            Channel ch = (Channel) loader.loadClass(MoonBridgeTransformer.NETWORK_MANAGER).getField("lastChannel").get(null);
            try (Socket accepted = server.accept()) {
                assertSame(NoDelayNioSocketChannel.class, ch.getClass());
                assertEquals(Boolean.TRUE, ch.config().getOption(ChannelOption.TCP_NODELAY));
            } finally {
                ch.close().syncUninterruptibly();
            }

            // Unpatched: the game's own NIO channel with Nagle on.
            ClassLoader plain = new TransformingLoader(false);
            invokeStatic(plain, MoonBridgeTransformer.NETWORK_MANAGER, "func_150726_a", sig, local, server.getLocalPort());
            Channel vanilla = (Channel) plain.loadClass(MoonBridgeTransformer.NETWORK_MANAGER).getField("lastChannel").get(null);
            try (Socket accepted = server.accept()) {
                assertSame(NioSocketChannel.class, vanilla.getClass());
                assertEquals(Boolean.FALSE, vanilla.config().getOption(ChannelOption.TCP_NODELAY));
            } finally {
                vanilla.close().syncUninterruptibly();
            }
        }

        // Routed: the MoonBridge channel, whose connect failure reads well in the game's error screen.
        int dead;
        try (ServerSocket s = new ServerSocket(0)) {
            dead = s.getLocalPort();
        }
        ClassLoader loader = new TransformingLoader(true);
        Class<?> nm = loader.loadClass(MoonBridgeTransformer.NETWORK_MANAGER);
        Routes.setIntent("routed.invalid", 25570, "ws://127.0.0.1:" + dead + "/mc", Routes.Route.Source.TYPED);
        InetAddress placeholder = MoonBridgeHooks.resolve("routed.invalid", nm);
        MoonBridgeConnectException e = assertThrows(MoonBridgeConnectException.class, () -> invokeStatic(loader,
                MoonBridgeTransformer.NETWORK_MANAGER, "func_150726_a", new Class<?>[] {InetAddress.class, int.class},
                placeholder, 25570));
        Channel ch = (Channel) nm.getField("lastChannel").get(null);
        assertSame(MoonBridgeChannel.class, ch.getClass());
        assertTrue(e.toString().startsWith("MoonBridge cannot reach ws://127.0.0.1:" + dead + "/mc: "), e.toString());
        assertTrue(e.toString().contains("refused"), e.toString());
        assertFalse(ch.isOpen());
    }

    @Test
    void aClassWithoutItsTargetIsLeftUnchanged() throws Exception {
        // A class under a target's name but without the target method: the very same bytes come back.
        byte[] other = TransformingLoader.bytesOf(SERVER_DATA);
        for (String target : new String[] {MoonBridgeTransformer.NETWORK_MANAGER, MoonBridgeTransformer.SERVER_ADDRESS,
                MoonBridgeTransformer.GUI_CONNECTING_THREAD, MoonBridgeTransformer.OLD_SERVER_PINGER}) {
            assertSame(other, new MoonBridgeTransformer().transform(target, target, other), target);
        }
        // Classes that are not targets are never parsed.
        byte[] junk = {1, 2, 3};
        assertSame(junk, new MoonBridgeTransformer().transform("x", "net.minecraft.world.World", junk));
        // A broken target class is left as it is, not thrown at the game.
        assertSame(junk, new MoonBridgeTransformer().transform("x", MoonBridgeTransformer.NETWORK_MANAGER, junk));
        assertNull(new MoonBridgeTransformer().transform("x", MoonBridgeTransformer.NETWORK_MANAGER, null));
        // The real targets do change, and NetworkManager gets its marker.
        byte[] nm = TransformingLoader.bytesOf(MoonBridgeTransformer.NETWORK_MANAGER);
        assertNotSame(nm, new MoonBridgeTransformer().transform("x", MoonBridgeTransformer.NETWORK_MANAGER, nm));
        assertArrayEquals(TransformingLoader.bytesOf(MoonBridgeTransformer.NETWORK_MANAGER), nm, "input not modified");
        Class<?> patched = new TransformingLoader(true).loadClass(MoonBridgeTransformer.NETWORK_MANAGER);
        assertTrue(patched.getDeclaredField(MoonBridgeHooks.CHANNEL_PATCH_MARKER).getBoolean(null));
    }
}
