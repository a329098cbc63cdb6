package dev.moonbridge.client;

import java.io.File;
import java.nio.file.Files;
import java.util.HashMap;
import java.util.Map;

/**
 * A separate JVM for the native-loading tests (case C23), run by {@code NativeLoaderIT} on Linux and by
 * {@code WindowsJvmIT} with a Windows JVM under Wine. Arguments (values may carry {@code \\uXXXX} escapes, so
 * non-ASCII text reaches the JVM intact whatever the launcher's code page):
 *
 * <ul>
 *   <li>{@code --tmpdir DIR}, {@code --home DIR}, {@code --user NAME}: set {@code java.io.tmpdir},
 *       {@code user.home} and {@code user.name} before loading; {@code --mkdir} creates the temp directory first;</li>
 *   <li>{@code --login URL --ca FILE}: after loading, log in over {@code URL} through {@link NativeTransport} and
 *       wait for Join Game;</li>
 *   <li>{@code --hooks ROUTE_URL}: load through the mod's hooks instead and show what a player sees: a vanilla
 *       connection and a MoonBridge one ({@code dev.moonbridge.forge.LoaderProbeHooks}).</li>
 * </ul>
 *
 * Prints {@code loaded <file>} or {@code load failed: <message>}, then {@code login ok} (or the hooks' lines).
 */
public final class LoaderProbe {
    private LoaderProbe() {}

    static String unescape(String s) {
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '\\' && i + 5 < s.length() && s.charAt(i + 1) == 'u') {
                out.append((char) Integer.parseInt(s.substring(i + 2, i + 6), 16));
                i += 5;
            } else {
                out.append(c);
            }
        }
        return out.toString();
    }

    /** Escapes every non-ASCII character and the backslash as {@code \\uXXXX}. */
    static String escape(String s) {
        StringBuilder out = new StringBuilder();
        for (char c : s.toCharArray()) {
            if (c < 0x80 && c != '\\') {
                out.append(c);
            } else {
                out.append(String.format("\\u%04x", (int) c));
            }
        }
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<String, String>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--mkdir")) {
                opts.put("--mkdir", "");
            } else {
                opts.put(args[i], unescape(args[++i]));
            }
        }
        if (opts.containsKey("--user")) {
            System.setProperty("user.name", opts.get("--user"));
        }
        if (opts.containsKey("--home")) {
            System.setProperty("user.home", opts.get("--home"));
        }
        if (opts.containsKey("--tmpdir")) {
            System.setProperty("java.io.tmpdir", opts.get("--tmpdir"));
            if (opts.containsKey("--mkdir")) {
                Files.createDirectories(new File(opts.get("--tmpdir")).toPath());
            }
        }
        if (opts.containsKey("--hooks")) {
            dev.moonbridge.forge.LoaderProbeHooks.run(opts.get("--hooks"));
            return;
        }
        try {
            NativeLoader.load();
            System.out.println("loaded " + escape(NativeLoader.loadedFrom().getPath()));
        } catch (UnsatisfiedLinkError e) {
            System.out.println("load failed: " + escape(String.valueOf(e.getMessage())));
            System.exit(3);
        }
        if (opts.containsKey("--login")) {
            String options = "{\"ca_file\":" + Mc.json(opts.get("--ca")) + "}";
            try (NativeTransport t = NativeTransport.open(opts.get("--login"), options)) {
                Mc mc = new Mc(t);
                mc.login("ProbeSteve", true);
                if (mc.next().id != 0x02) {
                    throw new IllegalStateException("no Login Success");
                }
                while (mc.next().id != 0x01) {
                    // until Join Game
                }
                System.out.println("login ok over " + opts.get("--login"));
            }
        }
    }
}
