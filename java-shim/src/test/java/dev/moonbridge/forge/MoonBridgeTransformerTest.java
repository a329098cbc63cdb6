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
import io.netty.channel.ChannelOption;
import io.netty.channel.socket.nio.NioSocketChannel;
import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.UnknownHostException;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The transformer on fixture classes with the names, descriptors and bytecode shape of the 1.7.10 targets:
 * transform, load, and check the behaviour.
 */
class MoonBridgeTransformerTest {
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

    private static Object invokeStatic(ClassLoader loader, String cls, String method, Class<?>[] types, Object... args)
            throws Exception {
        Method m = loader.loadClass(cls).getMethod(method, types);
        try {
            return m.invoke(null, args);
        } catch (InvocationTargetException e) {
            throw (Exception) e.getCause();
        }
    }

    @Test
    void typedUrlsBecomeHostAndPortAndARoute() throws Exception {
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

        // Ordinary addresses are untouched and add no route.
        Routes.clear();
        a = parse.invoke(null, "mc.example.com:25566");
        assertEquals("mc.example.com", ip.invoke(a));
        assertEquals(25566, port.invoke(a));
        assertNull(Routes.find("mc.example.com", 25566));

        // Untransformed, a URL is garbage to the game: that is what the patch is for.
        Object raw = new TransformingLoader(false).loadClass(MoonBridgeTransformer.SERVER_ADDRESS)
                .getMethod("func_78860_a", String.class).invoke(null, "wss://mc.example.com/mc");
        assertEquals("wss", raw.getClass().getMethod("func_78861_a").invoke(raw));
    }

    @Test
    void routedHostsAreNeverLookedUp() throws Exception {
        Routes.put("moonbridge-route.invalid", 443, "wss://moonbridge-route.invalid/mc");
        for (boolean transform : new boolean[] {true, false}) {
            ClassLoader loader = new TransformingLoader(transform);
            Thread t = (Thread) loader.loadClass(MoonBridgeTransformer.GUI_CONNECTING_THREAD)
                    .getConstructor(String.class).newInstance("moonbridge-route.invalid");
            t.run();
            Field resolved = t.getClass().getField("resolved");
            Field error = t.getClass().getField("error");
            if (transform) {
                InetAddress addr = (InetAddress) resolved.get(t);
                assertNull(error.get(t));
                assertEquals("moonbridge-route.invalid/0.0.0.0", addr.toString(), "a placeholder, no DNS");
            } else {
                assertTrue(error.get(t) instanceof UnknownHostException, "the unpatched game would look it up");
            }
        }
        // Unrouted hosts still resolve normally.
        ClassLoader loader = new TransformingLoader(true);
        Thread t = (Thread) loader.loadClass(MoonBridgeTransformer.GUI_CONNECTING_THREAD)
                .getConstructor(String.class).newInstance("127.0.0.1");
        t.run();
        assertEquals(InetAddress.getByName("127.0.0.1"), t.getClass().getField("resolved").get(t));
    }

    @Test
    void serverListPingsUseTheSameRoutes() throws Exception {
        ClassLoader loader = new TransformingLoader(true);
        Class<?> data = loader.loadClass("net.minecraft.client.multiplayer.ServerData");
        Class<?> pinger = loader.loadClass(MoonBridgeTransformer.OLD_SERVER_PINGER);
        Object p = pinger.getConstructor().newInstance();
        pinger.getMethod("func_147224_a", data).invoke(p, data.getConstructor(String.class).newInstance("wss://list.invalid/mc"));
        assertEquals("list.invalid/0.0.0.0", pinger.getField("lastAddress").get(p).toString());
        assertEquals(443, pinger.getField("lastPort").get(p));
    }

    @Test
    void vanillaConnectionsGetNodelayAndRoutedOnesTheMoonBridgeChannel() throws Exception {
        try (ServerSocket server = new ServerSocket(0)) {
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
        Routes.put("routed.invalid", 25565, "ws://127.0.0.1:" + dead + "/mc");
        ClassLoader loader = new TransformingLoader(true);
        InetAddress placeholder = MoonBridgeHooks.resolve("routed.invalid");
        MoonBridgeConnectException e = assertThrows(MoonBridgeConnectException.class, () -> invokeStatic(loader,
                MoonBridgeTransformer.NETWORK_MANAGER, "func_150726_a", new Class<?>[] {InetAddress.class, int.class},
                placeholder, 25565));
        Channel ch = (Channel) loader.loadClass(MoonBridgeTransformer.NETWORK_MANAGER).getField("lastChannel").get(null);
        assertSame(MoonBridgeChannel.class, ch.getClass());
        assertTrue(e.toString().startsWith("MoonBridge cannot reach ws://127.0.0.1:" + dead + "/mc: "), e.toString());
        assertTrue(e.toString().contains("refused"), e.toString());
        assertFalse(ch.isOpen());
    }

    @Test
    void aClassWithoutItsTargetIsLeftUnchanged() throws Exception {
        // A class under a target's name but without the target method: the very same bytes come back.
        byte[] other = TransformingLoader.bytesOf("net.minecraft.client.multiplayer.ServerData");
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
        // The real targets do change.
        byte[] nm = TransformingLoader.bytesOf(MoonBridgeTransformer.NETWORK_MANAGER);
        assertNotSame(nm, new MoonBridgeTransformer().transform("x", MoonBridgeTransformer.NETWORK_MANAGER, nm));
        assertArrayEquals(TransformingLoader.bytesOf(MoonBridgeTransformer.NETWORK_MANAGER), nm, "input not modified");
    }
}
