package net.minecraft.client.multiplayer;

/** Test fixture: 1.7.10's server-list entry, with its address field under its SRG name. */
public class ServerData {
    public String field_78845_b;

    public ServerData(String address) {
        this.field_78845_b = address;
    }
}
