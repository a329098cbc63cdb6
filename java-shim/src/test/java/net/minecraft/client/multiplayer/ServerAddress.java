package net.minecraft.client.multiplayer;

import java.util.Hashtable;
import javax.naming.directory.Attributes;
import javax.naming.directory.InitialDirContext;

/**
 * Test fixture with the name, descriptors and logic of 1.7.10's {@code ServerAddress}: {@code func_78860_a}
 * splits {@code host[:port]} (IPv6 in brackets) with port 25565 by default and, for port 25565 only, asks
 * {@code func_78863_b} for the SRV record {@code _minecraft._tcp.<host>} through JNDI's DNS provider, taking its
 * target and port. The one difference from the game: the JNDI provider URL comes from the system property
 * {@code moonbridge.test.dns} ({@code dns://127.0.0.1:<port>}, the tests' DNS server) instead of {@code "dns:"}
 * (the system's servers).
 */
public class ServerAddress {
    private final String field_78866_a;
    private final int field_78865_b;

    protected ServerAddress(String host, int port) {
        this.field_78866_a = host;
        this.field_78865_b = port;
    }

    public String func_78861_a() {
        return field_78866_a;
    }

    public int func_78864_b() {
        return field_78865_b;
    }

    public static ServerAddress func_78860_a(String typed) {
        if (typed == null) {
            return null;
        }
        String[] parts = typed.split(":");
        if (typed.startsWith("[")) {
            int close = typed.indexOf("]");
            if (close > 0) {
                String host = typed.substring(1, close);
                String rest = typed.substring(close + 1).trim();
                if (rest.startsWith(":") && rest.length() > 0) {
                    rest = rest.substring(1);
                    parts = new String[] {host, rest};
                } else {
                    parts = new String[] {host};
                }
            }
        }
        if (parts.length > 2) {
            parts = new String[] {typed};
        }
        String host = parts[0];
        int port = parts.length > 1 ? func_78862_a(parts[1], 25565) : 25565;
        if (port == 25565) {
            String[] srv = func_78863_b(host);
            host = srv[0];
            port = func_78862_a(srv[1], 25565);
        }
        return new ServerAddress(host, port);
    }

    private static String[] func_78863_b(String host) {
        try {
            Class.forName("com.sun.jndi.dns.DnsContextFactory");
            Hashtable<String, String> env = new Hashtable<String, String>();
            env.put("java.naming.factory.initial", "com.sun.jndi.dns.DnsContextFactory");
            env.put("java.naming.provider.url", System.getProperty("moonbridge.test.dns", "dns:"));
            env.put("com.sun.jndi.dns.timeout.retries", "1");
            InitialDirContext ctx = new InitialDirContext(env);
            Attributes attributes = ctx.getAttributes("_minecraft._tcp." + host, new String[] {"SRV"});
            String[] srv = attributes.get("srv").get().toString().split(" ", 4);
            return new String[] {srv[3], srv[2]};
        } catch (Throwable t) {
            return new String[] {host, Integer.toString(25565)};
        }
    }

    private static int func_78862_a(String text, int fallback) {
        try {
            return Integer.parseInt(text.trim());
        } catch (Exception e) {
            return fallback;
        }
    }
}
