package dev.moonbridge.forge;

import dev.moonbridge.client.NativeLoader;
import dev.moonbridge.client.Routes;
import dev.moonbridge.client.netty.MoonBridgeChannel;
import dev.moonbridge.client.netty.NoDelayNioSocketChannel;
import java.io.File;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.Locale;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * Static entry points called from the game's code after {@link MoonBridgeTransformer} patched it. Each one
 * falls back to the game's own behaviour on any unexpected error, so a MoonBridge problem never crashes the
 * game.
 */
public final class MoonBridgeHooks {
    static final Logger LOG = LogManager.getLogger("MoonBridge");
    private static volatile boolean configured;
    private static volatile Boolean nativeAvailable;

    private MoonBridgeHooks() {}

    /** Loads {@code config/moonbridge.cfg} (writing defaults first) into {@link Routes}. */
    public static synchronized void configure(File configFile) {
        try {
            MoonBridgeConfig c = MoonBridgeConfig.load(configFile);
            for (MoonBridgeConfig.Route r : c.routes) {
                Routes.put(r.host, r.port, r.url);
            }
            Routes.setDefaultOptions(c.optionsJson());
            for (String p : c.problems) {
                LOG.warn("MoonBridge: {}: {}", configFile, p);
            }
            LOG.info("MoonBridge: {} route(s) from {}", c.routes.size(), configFile);
        } catch (Throwable t) {
            LOG.error("MoonBridge: cannot read " + configFile + "; only typed ws:// and wss:// addresses will work", t);
        }
        configured = true;
    }

    static boolean isConfigured() {
        return configured;
    }

    /**
     * Loads the native library once; on an unsupported platform logs one clear line and returns false (the
     * game keeps its vanilla transport; MoonBridge servers then fail with a clear message).
     */
    public static boolean nativeAvailable() {
        Boolean a = nativeAvailable;
        if (a == null) {
            synchronized (MoonBridgeHooks.class) {
                a = nativeAvailable;
                if (a == null) {
                    try {
                        NativeLoader.load();
                        a = Boolean.TRUE;
                        LOG.info("MoonBridge: native library loaded from {}", NativeLoader.loadedFrom());
                    } catch (Throwable t) {
                        a = Boolean.FALSE;
                        LOG.warn("MoonBridge: native library unavailable ({}); vanilla connections are unchanged, "
                                + "ws:// and wss:// servers cannot be joined on this platform", t.getMessage());
                    }
                    nativeAvailable = a;
                }
            }
        }
        return a;
    }

    /**
     * Hook at the start of {@code ServerAddress.func_78860_a(String)}: a typed {@code ws://} or {@code wss://}
     * URL is remembered as a route and handed on as {@code host:port}, so the game sends the URL's host in its
     * handshake and never tries to resolve the URL itself.
     */
    public static String rewriteServerAddress(String typed) {
        try {
            if (typed == null) {
                return null;
            }
            String t = typed.trim();
            String lower = t.toLowerCase(Locale.ROOT);
            boolean tls = lower.startsWith("wss://");
            if (!tls && !lower.startsWith("ws://")) {
                return typed;
            }
            String rest = t.substring(tls ? 6 : 5);
            int slash = rest.indexOf('/');
            String authority = slash < 0 ? rest : rest.substring(0, slash);
            String host;
            int port = tls ? 443 : 80;
            if (authority.startsWith("[")) {
                int close = authority.indexOf(']');
                if (close < 0) {
                    return typed;
                }
                host = authority.substring(1, close);
                String after = authority.substring(close + 1);
                if (after.startsWith(":")) {
                    port = Integer.parseInt(after.substring(1));
                }
            } else {
                int colon = authority.lastIndexOf(':');
                host = colon < 0 ? authority : authority.substring(0, colon);
                if (colon >= 0) {
                    port = Integer.parseInt(authority.substring(colon + 1));
                }
            }
            if (host.isEmpty() || port <= 0 || port > 65535) {
                return typed;
            }
            String url = slash < 0 ? t + "/" : t;
            Routes.put(host, port, url);
            return (host.indexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + port;
        } catch (Throwable e) {
            LOG.warn("MoonBridge: cannot read server address {}: {}", typed, e.toString());
            return typed;
        }
    }

    /**
     * Replaces {@code InetAddress.getByName(host)} in the game's connect and server-list code: a host with a
     * MoonBridge route gets an unresolved placeholder (0.0.0.0 named {@code host}) so no DNS lookup happens;
     * every other host resolves as before.
     */
    public static InetAddress resolve(String host) throws UnknownHostException {
        if (host != null && Routes.hasHost(host)) {
            return InetAddress.getByAddress(host, new byte[4]);
        }
        return InetAddress.getByName(host);
    }

    /**
     * Replaces {@code NioSocketChannel.class} in {@code NetworkManager.func_150726_a} (provideLanClient): the
     * channel class for this address. Routed addresses get {@link MoonBridgeChannel}; all others the NIO channel
     * with TCP_NODELAY on.
     */
    public static Class<?> channelClass(InetAddress address, int port) {
        try {
            String host = hostOf(address);
            if (host != null && Routes.find(host, port) != null) {
                nativeAvailable(); // logs the one line when the platform is unsupported
                return MoonBridgeChannel.class;
            }
        } catch (Throwable t) {
            LOG.warn("MoonBridge: route lookup failed, using a plain connection: {}", t.toString());
        }
        return NoDelayNioSocketChannel.class;
    }

    /** The host name an address was created with, without a reverse DNS lookup. */
    static String hostOf(InetAddress address) {
        if (address == null) {
            return null;
        }
        String s = address.toString(); // "host/1.2.3.4", or "/1.2.3.4" when created without a name
        int slash = s.indexOf('/');
        return slash > 0 ? s.substring(0, slash) : null;
    }
}
