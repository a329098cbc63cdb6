package net.minecraft.client.network;

import java.net.InetAddress;
import java.net.UnknownHostException;
import net.minecraft.client.multiplayer.ServerAddress;
import net.minecraft.client.multiplayer.ServerData;

/**
 * Test fixture with the name and descriptor of 1.7.10's {@code OldServerPinger.func_147224_a(ServerData)}: parse
 * the entry's address, then {@code InetAddress.getByName} its host (the real one then pings).
 */
public class OldServerPinger {
    public volatile InetAddress lastAddress;
    public volatile int lastPort;

    public void func_147224_a(ServerData server) throws UnknownHostException {
        ServerAddress address = ServerAddress.func_78860_a(server.field_78845_b);
        lastAddress = InetAddress.getByName(address.func_78861_a());
        lastPort = address.func_78864_b();
    }
}
