package dev.moonbridge.forge;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * {@code config/moonbridge.cfg}: routes from typed addresses to MoonBridge URLs, and the native library's
 * options. Written with defaults and comments on first start. Format (Forge-style sections):
 *
 * <pre>
 * routes {
 *     play.example.com = wss://play.example.com/mc
 *     play.example.com:25566 = wss://cdn.example.com/mc2
 * }
 * options {
 *     coalesce = tick
 *     tls_versions = 1.2,1.3
 *     ca_file =
 *     ping_interval_ms = 30000
 *     connect_timeout_ms = 10000
 * }
 * discovery {
 *     enabled = true
 *     timeout_ms = 2000
 * }
 * </pre>
 */
public final class MoonBridgeConfig {
    /** A route line: typed {@code host[:port]} to URL. */
    public static final class Route {
        public final String host;
        public final int port;
        public final String url;

        Route(String host, int port, String url) {
            this.host = host;
            this.port = port;
            this.url = url;
        }
    }

    public final List<Route> routes = new ArrayList<Route>();
    public final Map<String, String> options = new LinkedHashMap<String, String>();
    public final List<String> problems = new ArrayList<String>();
    /** {@code discovery.enabled}: look up {@code _moonbridge.<host>} TXT records (default true). */
    public boolean discoveryEnabled = true;
    /** {@code discovery.timeout_ms}: bound on one lookup, in milliseconds (default 2000). */
    public int discoveryTimeoutMs = 2000;

    static final String[] OPTION_KEYS = {"coalesce", "tls_versions", "ca_file", "ping_interval_ms", "connect_timeout_ms"};

    /** The file written on first start. */
    public static String defaultText() {
        return "# MoonBridge client configuration.\n"
                + "#\n"
                + "# Players can type ws://host[:port]/path or wss://host[:port]/path as a server address. A modpack can\n"
                + "# instead map the usual addresses to MoonBridge URLs here, so players keep typing what they know.\n"
                + "\n"
                + "# Routes: <host>[:<port>] = <ws:// or wss:// URL>. Without a port, every port of that host.\n"
                + "routes {\n"
                + "    # play.example.com = wss://play.example.com/mc\n"
                + "}\n"
                + "\n"
                + "# Options for the MoonBridge connection (see the README of MoonBridge).\n"
                + "options {\n"
                + "    # tick: all packets of one game tick leave as one WebSocket message (default). off: one per packet.\n"
                + "    coalesce = tick\n"
                + "\n"
                + "    # TLS versions offered for wss://, comma-separated: 1.2,1.3 (default), or 1.2 alone.\n"
                + "    tls_versions = 1.2,1.3\n"
                + "\n"
                + "    # A PEM file of extra trusted certificate authorities (public CAs are always trusted). Empty: none.\n"
                + "    ca_file =\n"
                + "\n"
                + "    # Send a WebSocket ping after this many milliseconds without sending anything; 0 turns pings off.\n"
                + "    # Keep it well under 100000: CDNs close WebSockets that are quiet for about 100 seconds.\n"
                + "    ping_interval_ms = 30000\n"
                + "\n"
                + "    # Give up connecting after this many milliseconds.\n"
                + "    connect_timeout_ms = 10000\n"
                + "}\n"
                + "\n"
                + "# Route discovery: for a server typed without a port, ask DNS for a TXT record _moonbridge.<host>; a server\n"
                + "# that publishes its MoonBridge URL there is joined through MoonBridge with no route above. Routes above win.\n"
                + "discovery {\n"
                + "    # true (default) or false.\n"
                + "    enabled = true\n"
                + "\n"
                + "    # Give up on a lookup after this many milliseconds (the server is then joined as usual).\n"
                + "    timeout_ms = 2000\n"
                + "}\n";
    }

    /** Reads {@code file}, writing the defaults there first when it does not exist. */
    public static MoonBridgeConfig load(File file) throws IOException {
        if (!file.exists()) {
            File dir = file.getParentFile();
            if (dir != null && !dir.isDirectory() && !dir.mkdirs()) {
                throw new IOException("cannot create " + dir);
            }
            Files.write(file.toPath(), defaultText().getBytes(StandardCharsets.UTF_8));
        }
        return parse(new String(Files.readAllBytes(file.toPath()), StandardCharsets.UTF_8));
    }

    /** Parses the text; problems are collected (line numbers), never thrown. */
    public static MoonBridgeConfig parse(String text) {
        MoonBridgeConfig c = new MoonBridgeConfig();
        String section = null;
        String[] lines = text.split("\r?\n");
        for (int i = 0; i < lines.length; i++) {
            String line = lines[i].trim();
            int lineNo = i + 1;
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            if (line.endsWith("{")) {
                section = line.substring(0, line.length() - 1).trim().toLowerCase(Locale.ROOT);
                if (!section.equals("routes") && !section.equals("options") && !section.equals("discovery")) {
                    c.problems.add("line " + lineNo + ": unknown section " + section);
                }
                continue;
            }
            if (line.equals("}")) {
                section = null;
                continue;
            }
            int eq = line.indexOf('=');
            if (eq < 0 || section == null) {
                c.problems.add("line " + lineNo + ": expected key = value inside routes { }, options { } or discovery { }");
                continue;
            }
            String key = line.substring(0, eq).trim();
            String value = line.substring(eq + 1).trim();
            if (section.equals("routes")) {
                c.addRoute(lineNo, key, value);
            } else if (section.equals("discovery")) {
                c.setDiscovery(lineNo, key, value);
            } else if (section.equals("options")) {
                boolean known = false;
                for (String k : OPTION_KEYS) {
                    known |= k.equals(key);
                }
                if (!known) {
                    c.problems.add("line " + lineNo + ": unknown option " + key);
                } else {
                    c.options.put(key, value);
                }
            }
        }
        return c;
    }

    private void setDiscovery(int lineNo, String key, String value) {
        if (key.equals("enabled")) {
            if (value.equalsIgnoreCase("true") || value.equalsIgnoreCase("false")) {
                discoveryEnabled = Boolean.parseBoolean(value.toLowerCase(Locale.ROOT));
            } else {
                problems.add("line " + lineNo + ": discovery enabled must be true or false, not " + value);
            }
        } else if (key.equals("timeout_ms")) {
            try {
                int ms = Integer.parseInt(value);
                if (ms < 1 || ms > 30000) {
                    throw new NumberFormatException();
                }
                discoveryTimeoutMs = ms;
            } catch (NumberFormatException e) {
                problems.add("line " + lineNo + ": discovery timeout_ms must be 1-30000, not " + value);
            }
        } else {
            problems.add("line " + lineNo + ": unknown discovery key " + key);
        }
    }

    private void addRoute(int lineNo, String key, String url) {
        String lower = url.toLowerCase(Locale.ROOT);
        if (!lower.startsWith("ws://") && !lower.startsWith("wss://")) {
            problems.add("line " + lineNo + ": route " + key + " must map to a ws:// or wss:// URL");
            return;
        }
        String host = key;
        int port = -1;
        if (key.startsWith("[")) {
            int close = key.indexOf(']');
            host = close > 0 ? key.substring(1, close) : key;
            String rest = close > 0 ? key.substring(close + 1) : "";
            if (rest.startsWith(":")) {
                port = parsePort(rest.substring(1));
            }
        } else if (key.indexOf(':') > 0 && key.indexOf(':') == key.lastIndexOf(':')) {
            host = key.substring(0, key.indexOf(':'));
            port = parsePort(key.substring(key.indexOf(':') + 1));
        }
        if (host.isEmpty() || port == -2) {
            problems.add("line " + lineNo + ": bad route address " + key);
            return;
        }
        routes.add(new Route(host, port, url));
    }

    private static int parsePort(String s) {
        try {
            int p = Integer.parseInt(s.trim());
            return p > 0 && p < 65536 ? p : -2;
        } catch (NumberFormatException e) {
            return -2;
        }
    }

    /** The options as the native library's JSON object (only keys that are set). */
    public String optionsJson() {
        JsonObject o = new JsonObject();
        for (Map.Entry<String, String> e : options.entrySet()) {
            String k = e.getKey();
            String v = e.getValue();
            if (v.isEmpty()) {
                continue;
            }
            if (k.equals("tls_versions")) {
                JsonArray a = new JsonArray();
                for (String part : v.split(",")) {
                    if (!part.trim().isEmpty()) {
                        a.add(new JsonPrimitive(part.trim()));
                    }
                }
                o.add(k, a);
            } else if (k.endsWith("_ms")) {
                try {
                    o.addProperty(k, Long.parseLong(v));
                } catch (NumberFormatException ex) {
                    problems.add("option " + k + " is not a number: " + v);
                }
            } else {
                o.addProperty(k, v);
            }
        }
        return o.toString();
    }
}
