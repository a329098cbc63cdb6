package dev.moonbridge.forge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moonbridge.client.Routes;
import dev.moonbridge.client.netty.MoonBridgeChannel;
import dev.moonbridge.client.netty.NoDelayNioSocketChannel;
import java.io.File;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
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
        assertNull(MoonBridgeHooks.rewriteServerAddress(null));
        assertEquals("plain.example.com", MoonBridgeHooks.rewriteServerAddress("plain.example.com"));
    }

    @Test
    void channelClassFollowsTheRoutes() throws Exception {
        Routes.put("play.example.com", -1, "wss://cdn.example.com/mc");
        InetAddress placeholder = MoonBridgeHooks.resolve("play.example.com");
        assertSame(MoonBridgeChannel.class, MoonBridgeHooks.channelClass(placeholder, 25565));
        assertSame(MoonBridgeChannel.class, MoonBridgeHooks.channelClass(placeholder, 1234), "any port");
        assertSame(NoDelayNioSocketChannel.class, MoonBridgeHooks.channelClass(InetAddress.getByName("127.0.0.1"), 25565));
        assertSame(NoDelayNioSocketChannel.class, MoonBridgeHooks.channelClass(null, 25565));
        assertEquals("play.example.com", MoonBridgeHooks.hostOf(placeholder));
        assertNull(MoonBridgeHooks.hostOf(InetAddress.getByAddress(new byte[] {127, 0, 0, 1})), "no reverse lookup");
    }

    @Test
    void configureLoadsRoutesAndOptions(@TempDir File dir) throws Exception {
        File cfg = new File(dir, "config/moonbridge.cfg");
        MoonBridgeHooks.configure(cfg);
        assertTrue(cfg.isFile(), "defaults written on first start");
        assertTrue(new String(Files.readAllBytes(cfg.toPath()), StandardCharsets.UTF_8).contains("routes {"));
        Files.write(cfg.toPath(), ("routes {\n  mc.example.com:25565 = wss://edge.example.com/mc\n}\n"
                + "options {\n  coalesce = off\n  ping_interval_ms = 20000\n}\n").getBytes(StandardCharsets.UTF_8));
        MoonBridgeHooks.configure(cfg);
        assertEquals("wss://edge.example.com/mc", Routes.find("MC.example.com.", 25565).url);
        assertNull(Routes.find("mc.example.com", 25566));
        assertEquals("{\"coalesce\":\"off\",\"ping_interval_ms\":20000}", Routes.defaultOptions());
    }
}
