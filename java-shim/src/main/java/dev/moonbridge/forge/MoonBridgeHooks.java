package dev.moonbridge.forge;

import dev.moonbridge.client.Discovery;
import dev.moonbridge.client.NativeLoader;
import dev.moonbridge.client.Routes;
import dev.moonbridge.client.netty.MoonBridgeChannel;
import dev.moonbridge.client.netty.MoonBridgeConnectException;
import dev.moonbridge.client.netty.NoDelayNioSocketChannel;
import io.netty.bootstrap.Bootstrap;
import io.netty.channel.ChannelFuture;
import io.netty.channel.DefaultChannelPromise;
import io.netty.util.concurrent.GlobalEventExecutor;
import java.io.File;
import java.lang.reflect.Method;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * Static entry points called from the game's code after {@link MoonBridgeTransformer} patched it. Each one
 * falls back to the game's own behaviour on any unexpected error, so a MoonBridge problem never crashes the
 * game.
 *
 * <p>How a connection finds its way (see {@link Routes}): the typed address is parsed on one thread
 * ({@link #rewriteServerAddress}, then {@link #srvLookup}), which records the thread's intent; the game's
 * connecting thread (which inherits it) asks {@link #resolve} for an address and gets a placeholder bound to the
 * route, and {@link #channelClass} gives that placeholder the MoonBridge channel. A placeholder is only handed
 * out when the {@code NetworkManager} patch is in place, and a plain channel never connects to one.
 */
public final class MoonBridgeHooks {
    static final Logger LOG = LogManager.getLogger("MoonBridge");
    /** The static field {@link MoonBridgeTransformer} adds to {@code NetworkManager} once its channel patch applied. */
    public static final String CHANNEL_PATCH_MARKER = "moonbridge$channelPatch";
    /** The port vanilla uses when none is typed (and the only one it looks SRV records up for). */
    static final int DEFAULT_PORT = 25565;

    private static volatile boolean configured;
    private static volatile Boolean nativeAvailable;
    private static volatile boolean warnedUnpatched;
    private static final Map<Class<?>, Boolean> CHANNEL_PATCHED = new ConcurrentHashMap<Class<?>, Boolean>();
    private static final Map<String, Method> SRV_METHODS = new ConcurrentHashMap<String, Method>();

    private MoonBridgeHooks() {}

    /** Loads {@code config/moonbridge.cfg} (writing defaults first) into {@link Routes} and {@link Discovery}. */
    public static synchronized void configure(File configFile) {
        try {
            MoonBridgeConfig c = MoonBridgeConfig.load(configFile);
            for (MoonBridgeConfig.Route r : c.routes) {
                Routes.putConfig(r.host, r.port, r.url);
            }
            Routes.setDefaultOptions(c.optionsJson());
            Discovery.configure(c.discoveryEnabled, c.discoveryTimeoutMs);
            for (String p : c.problems) {
                LOG.warn("MoonBridge: {}: {}", configFile, p);
            }
            LOG.info("MoonBridge: {} route(s) from {}; route discovery {}", c.routes.size(), configFile,
                    c.discoveryEnabled ? "on" : "off");
        } catch (Throwable t) {
            LOG.error("MoonBridge: cannot read " + configFile + "; only typed ws:// and wss:// addresses will work", t);
        }
        configured = true;
    }

    static boolean isConfigured() {
        return configured;
    }

    /**
     * Loads the native library once; when it cannot be loaded logs one clear line and returns false (the game
     * keeps its vanilla transport; MoonBridge servers then fail with a clear message).
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

    /** A parsed {@code ws://} or {@code wss://} URL: the URL to dial, and the host and port the game uses. */
    static final class TypedUrl {
        final String url;
        final String host;
        final int port;

        TypedUrl(String url, String host, int port) {
            this.url = url;
            this.host = host;
            this.port = port;
        }
    }

    /**
     * Reads a typed {@code ws://host[:port]/path} or {@code wss://…} address; {@code null} when it is not one.
     *
     * <p>Launchers' "join on start" passes {@code --server URL --port N}, and Forge glues {@code ":" + N} (25565
     * when no port was given) onto the URL. Such a suffix is taken off: a glued 25565 is dropped; another glued
     * port is used only when the URL itself has none (the URL's own port always wins). A URL without a path that
     * ends in {@code :25565} counts as glued too, so a WebSocket server on port 25565 needs a path in its URL.
     *
     * @throws IllegalArgumentException for a URL that is broken (the game then reports it as an address)
     */
    static TypedUrl parseTypedUrl(String typed) {
        String t = typed.trim();
        String lower = t.toLowerCase(Locale.ROOT);
        boolean tls = lower.startsWith("wss://");
        if (!tls && !lower.startsWith("ws://")) {
            return null;
        }
        String scheme = t.substring(0, tls ? 6 : 5);
        String rest = t.substring(tls ? 6 : 5);
        int glued = -1;
        java.util.regex.Matcher g = java.util.regex.Pattern.compile("^(.*[^:]):(\\d{1,5})$").matcher(rest);
        int slash0 = firstOf(rest, '/', '?');
        // A ":digits" suffix after the path, a second ":digits" after the authority's own port, or ":25565" on a
        // URL without a path (no WebSocket server is meant to be reached on the Minecraft port without one).
        if (g.matches() && (slash0 >= 0 && slash0 < g.start(2) || slash0 < 0 && authorityHasPort(g.group(1))
                || slash0 < 0 && g.group(2).equals(Integer.toString(DEFAULT_PORT)))) {
            glued = Integer.parseInt(g.group(2));
            rest = g.group(1);
        }
        int slash = firstOf(rest, '/', '?');
        String authority = slash < 0 ? rest : rest.substring(0, slash);
        String path = slash < 0 ? "/" : rest.charAt(slash) == '?' ? "/" + rest.substring(slash) : rest.substring(slash);
        String host;
        int port = -1;
        if (authority.startsWith("[")) {
            int close = authority.indexOf(']');
            if (close < 0) {
                throw new IllegalArgumentException("unclosed [ in " + typed);
            }
            host = authority.substring(1, close);
            String after = authority.substring(close + 1);
            if (after.startsWith(":")) {
                port = Integer.parseInt(after.substring(1));
            } else if (!after.isEmpty()) {
                throw new IllegalArgumentException("junk after the IPv6 host in " + typed);
            }
        } else {
            int colon = authority.lastIndexOf(':');
            host = colon < 0 ? authority : authority.substring(0, colon);
            if (colon >= 0) {
                port = Integer.parseInt(authority.substring(colon + 1));
            }
        }
        if (port < 0 && glued > 0 && glued != DEFAULT_PORT) {
            port = glued;
            authority = authority + ":" + glued;
        }
        if (port < 0) {
            port = tls ? 443 : 80;
        }
        if (host.isEmpty() || host.indexOf(':') >= 0 && !authority.startsWith("[") || port <= 0 || port > 65535) {
            throw new IllegalArgumentException("bad host or port in " + typed);
        }
        return new TypedUrl(scheme + authority + path, host, port);
    }

    /** The first index of {@code a} or {@code b} in {@code s}, or -1. */
    private static int firstOf(String s, char a, char b) {
        int i = s.indexOf(a);
        int j = s.indexOf(b);
        return i < 0 ? j : j < 0 ? i : Math.min(i, j);
    }

    private static boolean authorityHasPort(String authority) {
        int close = authority.lastIndexOf(']');
        return authority.indexOf(':', close + 1) >= 0;
    }

    /** Host and port as vanilla's {@code ServerAddress.func_78860_a} splits a plain typed address (before SRV). */
    static String[] vanillaSplit(String typed) {
        String[] parts = typed.split(":");
        if (typed.startsWith("[")) {
            int close = typed.indexOf(']');
            if (close > 0) {
                String host = typed.substring(1, close);
                String rest = typed.substring(close + 1).trim();
                parts = rest.startsWith(":") ? new String[] {host, rest.substring(1)} : new String[] {host};
            }
        }
        if (parts.length > 2) {
            parts = new String[] {typed};
        }
        int port = DEFAULT_PORT;
        if (parts.length > 1) {
            try {
                port = Integer.parseInt(parts[1].trim());
            } catch (NumberFormatException e) {
                port = DEFAULT_PORT;
            }
        }
        return new String[] {parts[0], Integer.toString(port)};
    }

    /**
     * Hook at the start of {@code ServerAddress.func_78860_a(String)}. A typed {@code ws://} or {@code wss://}
     * URL becomes this thread's intent and is handed on as {@code host:port} (IPv6 in brackets), so the game
     * sends the URL's host in its handshake and never tries to resolve the URL itself. A plain address with a
     * config route becomes the intent too; any other address clears it.
     */
    public static String rewriteServerAddress(String typed) {
        try {
            Routes.clearIntent();
            if (typed == null) {
                return null;
            }
            TypedUrl u = parseTypedUrl(typed);
            if (u != null) {
                Routes.setIntent(u.host, u.port, u.url, Routes.Route.Source.TYPED);
                return (u.host.indexOf(':') >= 0 ? "[" + u.host + "]" : u.host) + ":" + u.port;
            }
            String[] hp = vanillaSplit(typed.trim());
            int port = Integer.parseInt(hp[1]);
            Routes.Route r = Routes.config(hp[0], port);
            if (r != null) {
                Routes.setIntent(hp[0], port, r.url, Routes.Route.Source.CONFIG);
            }
            return typed;
        } catch (Throwable e) {
            LOG.warn("MoonBridge: cannot read server address {}: {}", typed, e.toString());
            return typed;
        }
    }

    /**
     * Replaces {@code ServerAddress.func_78863_b(String)}, vanilla's SRV lookup of {@code _minecraft._tcp.<host>}
     * (made only for port 25565). A routed host (typed URL, config route) skips SRV: the route decides. Otherwise
     * route discovery asks for {@code _moonbridge.<host>}; a record routes the host and skips SRV too. With no
     * record, vanilla's own lookup runs ({@code owner.method}, by reflection), port included.
     */
    public static String[] srvLookup(String host, Class<?> owner, String method) {
        try {
            Routes.Intent i = Routes.intent();
            if (i != null && i.route != null && i.host.equals(Routes.normalise(host)) && i.port == DEFAULT_PORT) {
                return new String[] {host, Integer.toString(DEFAULT_PORT)};
            }
            Routes.Route r = Routes.config(host, DEFAULT_PORT);
            if (r != null) {
                Routes.setIntent(host, DEFAULT_PORT, r.url, Routes.Route.Source.CONFIG);
                return new String[] {host, Integer.toString(DEFAULT_PORT)};
            }
            String discovered = Discovery.lookup(host);
            if (discovered != null) {
                LOG.info("MoonBridge: {} is reachable through MoonBridge at {} (DNS _moonbridge.{})", host, discovered, host);
                Routes.setIntent(host, DEFAULT_PORT, discovered, Routes.Route.Source.DISCOVERED);
                return new String[] {host, Integer.toString(DEFAULT_PORT)};
            }
        } catch (Throwable t) {
            LOG.warn("MoonBridge: route lookup for {} failed, using vanilla SRV: {}", host, t.toString());
        }
        return vanillaSrv(host, owner, method);
    }

    private static String[] vanillaSrv(String host, Class<?> owner, String method) {
        try {
            String key = owner.getName() + "." + method;
            Method m = SRV_METHODS.get(key);
            if (m == null) {
                m = owner.getDeclaredMethod(method, String.class);
                m.setAccessible(true);
                SRV_METHODS.put(key, m);
            }
            return (String[]) m.invoke(null, host);
        } catch (Throwable t) {
            // What vanilla's lookup itself answers when it fails.
            return new String[] {host, Integer.toString(DEFAULT_PORT)};
        }
    }

    /** True when {@code networkManager} carries the channel patch ({@link #CHANNEL_PATCH_MARKER}). */
    static boolean channelPatched(Class<?> networkManager) {
        if (networkManager == null) {
            return false;
        }
        Boolean p = CHANNEL_PATCHED.get(networkManager);
        if (p == null) {
            try {
                networkManager.getDeclaredField(CHANNEL_PATCH_MARKER);
                p = Boolean.TRUE;
            } catch (NoSuchFieldException e) {
                p = Boolean.FALSE;
            }
            CHANNEL_PATCHED.put(networkManager, p);
        }
        return p;
    }

    /**
     * Replaces {@code InetAddress.getByName(host)} in the game's connect and server-list code. The patched code
     * passes the {@code NetworkManager} class, which also makes sure it is loaded (and patched) first. A host
     * this thread intends to reach through MoonBridge gets its address bound to the route ({@link Routes#bind}:
     * the real address when it resolves, so a connection that bypasses MoonBridge still reaches that host; a
     * placeholder when it does not), provided the {@code NetworkManager} patch is in place; every other host
     * resolves as before.
     */
    public static InetAddress resolve(String host, Class<?> networkManager) throws UnknownHostException {
        Routes.Intent i = null;
        try {
            i = host == null ? null : Routes.intent();
        } catch (Throwable t) {
            LOG.warn("MoonBridge: route lookup failed, resolving {} as usual: {}", host, t.toString());
        }
        if (i != null && i.route != null && i.host.equals(Routes.normalise(host))) {
            if (channelPatched(networkManager)) {
                // Used once: threads this one starts later (the game's network threads) must not inherit it.
                Routes.clearIntent();
                return Routes.bind(host, i.port, i.route);
            }
            if (!warnedUnpatched) {
                warnedUnpatched = true;
                LOG.warn("MoonBridge: the game's connection code ({}) is not patched (another mod changed it first), so "
                        + "MoonBridge routes are off and {} is joined as a vanilla server", networkManager, host);
            }
        }
        return InetAddress.getByName(host);
    }

    /**
     * Replaces {@code NioSocketChannel.class} in {@code NetworkManager.func_150726_a} (provideLanClient): the
     * channel class for this address. Routed addresses (placeholders, and config routes by host name) get
     * {@link MoonBridgeChannel}; every other connection the NIO channel with TCP_NODELAY on, which resolves a
     * placeholder for real rather than connect to it.
     */
    public static Class<?> channelClass(InetAddress address, int port) {
        try {
            if (Routes.forAddress(address, port) != null) {
                nativeAvailable(); // logs the one line when the library cannot be loaded
                return MoonBridgeChannel.class;
            }
        } catch (Throwable t) {
            LOG.warn("MoonBridge: route lookup failed, using a plain connection: {}", t.toString());
        }
        return NoDelayNioSocketChannel.class;
    }

    /**
     * Replaces {@code Bootstrap.connect(host, port)} in {@code OldServerPinger.func_147225_b}, the 1.6-style
     * server-list ping the game tries when the modern status exchange failed. It opens its own plain TCP
     * connection, which for a MoonBridge server would go to the CDN's web port: routed entries skip it (the
     * returned future fails at once, no socket is opened); others ping as vanilla does.
     */
    public static ChannelFuture legacyPingConnect(Bootstrap bootstrap, String host, int port) {
        Routes.Route r = null;
        try {
            r = Routes.find(host, port);
        } catch (Throwable t) {
            LOG.warn("MoonBridge: route lookup failed for the legacy ping of {}: {}", host, t.toString());
        }
        if (r == null) {
            return bootstrap.connect(host, port);
        }
        DefaultChannelPromise skipped = new DefaultChannelPromise(null, GlobalEventExecutor.INSTANCE);
        skipped.setFailure(new MoonBridgeConnectException(
                "MoonBridge: no 1.6 server-list ping for " + r.url + " (the MoonBridge status answer is the only one)", null));
        return skipped;
    }
}
