package dev.moonbridge.client;

/**
 * Route discovery from the game's side: asks the native library for the DNS TXT record
 * {@code _moonbridge.<host>} (see {@code docs/java-shim.md}). Every failure (no record, no native library, a DNS
 * timeout) is "no route" and leaves the game vanilla, silently.
 */
public final class Discovery {
    /**
     * System property naming the DNS server ({@code IP:port}) discovery asks instead of the system's. For tests
     * only (a DNS server on loopback); players and modpacks never set it.
     */
    public static final String RESOLVER_PROPERTY = "moonbridge.discovery.resolver";
    /** Default bound on one lookup, in milliseconds. */
    public static final int DEFAULT_TIMEOUT_MS = 2000;

    private static volatile boolean enabled = true;
    private static volatile int timeoutMs = DEFAULT_TIMEOUT_MS;

    private Discovery() {}

    /** Turns discovery on or off and sets its time bound (from {@code config/moonbridge.cfg}). */
    public static void configure(boolean on, int timeoutMillis) {
        enabled = on;
        timeoutMs = timeoutMillis > 0 ? timeoutMillis : DEFAULT_TIMEOUT_MS;
    }

    public static boolean enabled() {
        return enabled;
    }

    /** The MoonBridge URL discovered for {@code host}, or {@code null}. */
    public static String lookup(String host) {
        // Which hosts are worth a lookup (names with a dot, no IP addresses) is the native library's rule.
        if (!enabled || host == null) {
            return null;
        }
        try {
            return NativeTransport.discover(host, System.getProperty(RESOLVER_PROPERTY), timeoutMs);
        } catch (Throwable t) {
            return null;
        }
    }
}
