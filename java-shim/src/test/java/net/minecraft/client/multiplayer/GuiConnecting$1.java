package net.minecraft.client.multiplayer;

import java.net.InetAddress;
import java.net.UnknownHostException;

/**
 * Test fixture named like 1.7.10's connecting thread ({@code GuiConnecting$1}): its {@code run()} resolves the
 * typed host with {@code InetAddress.getByName}, as the game does before {@code provideLanClient}.
 */
public class GuiConnecting$1 extends Thread {
    public final String host;
    public volatile InetAddress resolved;
    public volatile Throwable error;

    public GuiConnecting$1(String host) {
        this.host = host;
    }

    @Override
    public void run() {
        try {
            resolved = InetAddress.getByName(host);
        } catch (UnknownHostException e) {
            error = e;
        }
    }
}
