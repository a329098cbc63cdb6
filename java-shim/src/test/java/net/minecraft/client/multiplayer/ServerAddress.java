package net.minecraft.client.multiplayer;

/**
 * Test fixture with the name and descriptor of 1.7.10's {@code ServerAddress.func_78860_a(String)}: splits
 * {@code host[:port]} (IPv6 in brackets), port 25565 by default. The SRV lookup of the real method is left out.
 */
public class ServerAddress {
    private final String ip;
    private final int port;

    protected ServerAddress(String ip, int port) {
        this.ip = ip;
        this.port = port;
    }

    public String func_78861_a() {
        return ip;
    }

    public int func_78864_b() {
        return port;
    }

    public static ServerAddress func_78860_a(String typed) {
        if (typed == null) {
            return null;
        }
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
        int port = 25565;
        if (parts.length > 1) {
            try {
                port = Integer.parseInt(parts[1].trim());
            } catch (NumberFormatException e) {
                port = 25565;
            }
        }
        return new ServerAddress(parts[0], port);
    }
}
