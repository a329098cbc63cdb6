package net.minecraft.client.multiplayer;

/**
 * Test fixture: 1.7.10's server-list entry with its SRG field names: the typed address, the server-list text
 * ({@code field_78843_d}) and the ping time in milliseconds ({@code field_78844_e}, -1 while pinging). The
 * fixtures also keep the ping in nanoseconds for the tests' comparisons.
 */
public class ServerData {
    public String field_78845_b;
    public volatile String field_78843_d;
    public volatile long field_78844_e = -1L;
    public volatile long pingNanos = -1L;

    public ServerData(String address) {
        this.field_78845_b = address;
    }
}
