package dev.moonbridge.client;

import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Which typed server addresses travel over MoonBridge, and with which URL and options.
 *
 * <p>Keys are {@code host} (any port) or {@code host:port}; hosts are compared lowercased, without a trailing
 * dot and without IPv6 brackets. Entries come from {@code config/moonbridge.cfg} and from {@code ws://} /
 * {@code wss://} URLs typed as server addresses. Thread-safe.
 */
public final class Routes {
    /** A route: the URL to dial and the options for the native library. */
    public static final class Route {
        public final String url;
        public final String optionsJson;

        Route(String url, String optionsJson) {
            this.url = url;
            this.optionsJson = optionsJson;
        }

        @Override
        public String toString() {
            return url;
        }
    }

    private static final Map<String, Route> ROUTES = new ConcurrentHashMap<String, Route>();
    private static volatile String defaultOptions = null;

    private Routes() {}

    /** Options (JSON) used by routes that do not carry their own. */
    public static void setDefaultOptions(String optionsJson) {
        defaultOptions = optionsJson;
    }

    public static String defaultOptions() {
        return defaultOptions;
    }

    static String normalise(String host) {
        String h = host.trim().toLowerCase(Locale.ROOT);
        if (h.startsWith("[") && h.endsWith("]")) {
            h = h.substring(1, h.length() - 1);
        }
        if (h.endsWith(".")) {
            h = h.substring(0, h.length() - 1);
        }
        return h;
    }

    /** Adds a route for {@code host} ({@code port} &lt; 0: any port) to {@code url}. */
    public static void put(String host, int port, String url) {
        String key = port < 0 ? normalise(host) : normalise(host) + ":" + port;
        ROUTES.put(key, new Route(url, null));
    }

    /** The route for {@code host:port}, else for {@code host} on any port, else {@code null}. */
    public static Route find(String host, int port) {
        if (host == null) {
            return null;
        }
        String h = normalise(host);
        Route r = ROUTES.get(h + ":" + port);
        if (r == null) {
            r = ROUTES.get(h);
        }
        return r;
    }

    /** The options JSON for a route (its own, else the defaults). */
    public static String optionsFor(Route r) {
        return r.optionsJson != null ? r.optionsJson : defaultOptions;
    }

    /** True when {@code host} has a route on some port. */
    public static boolean hasHost(String host) {
        if (host == null) {
            return false;
        }
        String h = normalise(host);
        if (ROUTES.containsKey(h)) {
            return true;
        }
        for (String k : ROUTES.keySet()) {
            int colon = k.lastIndexOf(':');
            if (colon > 0 && k.substring(0, colon).equals(h)) {
                return true;
            }
        }
        return false;
    }

    /** Removes every route (tests, config reload). */
    public static void clear() {
        ROUTES.clear();
    }
}
