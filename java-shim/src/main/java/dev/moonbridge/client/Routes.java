package dev.moonbridge.client;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Which connections travel over MoonBridge, and with which URL and options.
 *
 * <p>Three sources, in this order of precedence:
 * <ol>
 *   <li><b>Config routes</b> from {@code config/moonbridge.cfg}: {@code host} (every port) or {@code host:port}
 *       to a URL. Hosts are compared lowercased, without a trailing dot and without IPv6 brackets.</li>
 *   <li><b>Typed URLs</b>: a {@code ws://} or {@code wss://} address in the server list. Such a route belongs to
 *       the connection attempt that parsed it, never to the host: two entries {@code wss://h/survival} and
 *       {@code wss://h/creative} are two routes. The parse records an {@link Intent} on its thread (inherited by
 *       the thread the game starts to connect), and the placeholder address handed out for it carries the route
 *       on to the channel.</li>
 *   <li><b>Discovered routes</b>: a DNS TXT record {@code _moonbridge.<host>} holding a URL (see
 *       {@code docs/java-shim.md}), for hosts typed without a port (port 25565), cached for the record's TTL by
 *       the native library.</li>
 * </ol>
 *
 * <p>The address the game gets for a routed host carries its route to the channel: {@link #bind} makes an
 * {@link InetAddress} object of the host's real address (so that, should some other code open a plain socket
 * to it, it reaches the host the player meant and no other) and remembers the route by that object's identity.
 * When the host does not resolve, a <b>placeholder</b> stands in: named after the host, with an address in
 * {@code 0.0.0.0/8} that is unique per connection attempt and never {@code 0.0.0.0} (the player's own machine);
 * the plain channel resolves a placeholder for real instead of connecting to it. Thread-safe.
 */
public final class Routes {
    /** A route: the URL to dial and the options for the native library. */
    public static final class Route {
        /** Where the route came from. */
        public enum Source {
            CONFIG,
            TYPED,
            DISCOVERED
        }

        public final String url;
        public final String optionsJson;
        public final Source source;

        Route(String url, String optionsJson, Source source) {
            this.url = url;
            this.optionsJson = optionsJson;
            this.source = source;
        }

        @Override
        public String toString() {
            return url + " (" + source.name().toLowerCase(Locale.ROOT) + ")";
        }
    }

    /** What the game is about to connect to on this thread: a host, a port and, when routed, its route. */
    public static final class Intent {
        public final String host;
        public final int port;
        public final Route route;

        Intent(String host, int port, Route route) {
            this.host = host;
            this.port = port;
            this.route = route;
        }

        boolean matches(String h, int p) {
            return host.equals(normalise(h)) && (p < 0 || port == p);
        }
    }

    /** Most bound addresses and placeholders remembered at once; the oldest is forgotten first (a connect uses
     * its address within seconds). */
    static final int MAX_PLACEHOLDERS = 4096;

    private static final Map<String, Route> CONFIG = new ConcurrentHashMap<String, Route>();
    private static final InheritableThreadLocal<Intent> INTENT = new InheritableThreadLocal<Intent>();
    private static final AtomicInteger NEXT_PLACEHOLDER = new AtomicInteger();
    private static final Map<Integer, Intent> PLACEHOLDERS = new LinkedHashMap<Integer, Intent>() {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<Integer, Intent> eldest) {
            return size() > MAX_PLACEHOLDERS;
        }
    };
    private static final Map<IdentityKey, Route> BOUND = new LinkedHashMap<IdentityKey, Route>() {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<IdentityKey, Route> eldest) {
            return size() > MAX_PLACEHOLDERS;
        }
    };
    private static volatile String defaultOptions = null;

    /** A map key comparing objects by identity. */
    private static final class IdentityKey {
        private final Object ref;

        IdentityKey(Object ref) {
            this.ref = ref;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof IdentityKey && ((IdentityKey) o).ref == ref;
        }

        @Override
        public int hashCode() {
            return System.identityHashCode(ref);
        }
    }

    private Routes() {}

    /** Options (JSON) used by routes that do not carry their own. */
    public static void setDefaultOptions(String optionsJson) {
        defaultOptions = optionsJson;
    }

    public static String defaultOptions() {
        return defaultOptions;
    }

    /** A host as routes compare it: trimmed, lowercased, without IPv6 brackets and without one trailing dot. */
    public static String normalise(String host) {
        String h = host.trim().toLowerCase(Locale.ROOT);
        if (h.startsWith("[") && h.endsWith("]")) {
            h = h.substring(1, h.length() - 1);
        }
        if (h.endsWith(".")) {
            h = h.substring(0, h.length() - 1);
        }
        return h;
    }

    /** Adds a config route for {@code host} ({@code port} &lt; 0: every port) to {@code url}. */
    public static void putConfig(String host, int port, String url) {
        String key = port < 0 ? normalise(host) : normalise(host) + ":" + port;
        CONFIG.put(key, new Route(url, null, Route.Source.CONFIG));
    }

    /** The config route for {@code host:port}, else for {@code host} on every port, else {@code null}. */
    public static Route config(String host, int port) {
        if (host == null) {
            return null;
        }
        String h = normalise(host);
        Route r = CONFIG.get(h + ":" + port);
        return r != null ? r : CONFIG.get(h);
    }

    /** Records what this thread (and threads it starts) is about to connect to; {@code null} clears it. */
    public static void setIntent(String host, int port, String url, Route.Source source) {
        INTENT.set(host == null ? null
                : new Intent(normalise(host), port, url == null ? null : new Route(url, null, source)));
    }

    /** Forgets this thread's intent. */
    public static void clearIntent() {
        INTENT.remove();
    }

    /** This thread's intent, or {@code null}. */
    public static Intent intent() {
        return INTENT.get();
    }

    /**
     * The route for a connection to {@code host:port} made on this thread: the config route, else this thread's
     * intent for that host and port, else {@code null}.
     */
    public static Route find(String host, int port) {
        if (host == null) {
            return null;
        }
        Route r = config(host, port);
        if (r != null) {
            return r;
        }
        Intent i = INTENT.get();
        return i != null && i.route != null && i.matches(host, port) ? i.route : null;
    }

    /**
     * A placeholder address for {@code host}, bound to {@code route} (kept until {@link #MAX_PLACEHOLDERS} newer
     * ones were made).
     */
    public static InetAddress placeholder(String host, int port, Route route) throws UnknownHostException {
        int n = 1 + (NEXT_PLACEHOLDER.getAndIncrement() & 0x7fffffff) % 0xfffffe; // 0.0.0.1 .. 0.255.255.254
        synchronized (PLACEHOLDERS) {
            PLACEHOLDERS.put(n, new Intent(normalise(host), port, route));
        }
        return InetAddress.getByAddress(host, new byte[] {0, (byte) (n >>> 16), (byte) (n >>> 8), (byte) n});
    }

    /** True for an address made by {@link #placeholder}: IPv4 {@code 0.x.y.z}, not {@code 0.0.0.0}. */
    public static boolean isPlaceholder(InetAddress address) {
        byte[] b = address == null ? null : address.getAddress();
        return b != null && b.length == 4 && b[0] == 0 && (b[1] | b[2] | b[3]) != 0;
    }

    /** The intent a placeholder was made for, or {@code null} (not a placeholder, or forgotten). */
    public static Intent placeholderIntent(InetAddress address) {
        if (!isPlaceholder(address)) {
            return null;
        }
        byte[] b = address.getAddress();
        int n = ((b[1] & 0xff) << 16) | ((b[2] & 0xff) << 8) | (b[3] & 0xff);
        synchronized (PLACEHOLDERS) {
            return PLACEHOLDERS.get(n);
        }
    }

    /**
     * The address {@code host} really has, as a new object bound to {@code route} (see the class
     * documentation); a placeholder when the host does not resolve.
     */
    public static InetAddress bind(String host, int port, Route route) throws UnknownHostException {
        InetAddress real;
        try {
            real = InetAddress.getByName(host);
        } catch (UnknownHostException e) {
            return placeholder(host, port, route);
        }
        InetAddress named = InetAddress.getByAddress(host, real.getAddress());
        synchronized (BOUND) {
            BOUND.put(new IdentityKey(named), route);
        }
        return named;
    }

    /**
     * The route for a connection to {@code address:port}: the route it was bound to ({@link #bind}, a
     * placeholder), else a config route by the host name the address carries (without a reverse lookup). Never
     * this thread's intent: this runs on the game's network threads, which hold no intent of their own.
     */
    public static Route forAddress(InetAddress address, int port) {
        if (address == null) {
            return null;
        }
        synchronized (BOUND) {
            Route bound = BOUND.get(new IdentityKey(address));
            if (bound != null) {
                return bound;
            }
        }
        Intent i = placeholderIntent(address);
        if (i != null && i.route != null) {
            return i.route;
        }
        return config(hostOf(address), port);
    }

    /** The host name an address was created with, without a reverse DNS lookup; {@code null} if none. */
    public static String hostOf(InetAddress address) {
        if (address == null) {
            return null;
        }
        String s = address.toString(); // "host/1.2.3.4", or "/1.2.3.4" when created without a name
        int slash = s.indexOf('/');
        return slash > 0 ? s.substring(0, slash) : null;
    }

    /** The options JSON for a route (its own, else the defaults). */
    public static String optionsFor(Route r) {
        return r.optionsJson != null ? r.optionsJson : defaultOptions;
    }

    /** Removes every config route, bound address and placeholder, and this thread's intent (tests, reload). */
    public static void clear() {
        CONFIG.clear();
        INTENT.remove();
        synchronized (PLACEHOLDERS) {
            PLACEHOLDERS.clear();
        }
        synchronized (BOUND) {
            BOUND.clear();
        }
    }
}
