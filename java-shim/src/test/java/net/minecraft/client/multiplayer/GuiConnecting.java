package net.minecraft.client.multiplayer;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import net.minecraft.network.NetworkManager;

/**
 * Test fixture with the shape of 1.7.10's {@code GuiConnecting}: the constructor parses the entry's address on
 * the calling thread ({@code ServerAddress.func_78860_a}, SRV included), then {@code func_146367_a} starts the
 * anonymous connector thread {@code GuiConnecting$1}, whose {@code run()} resolves the host with
 * {@code InetAddress.getByName}, calls {@code NetworkManager.func_150726_a(address, port)} and sends the
 * handshake (next state login, the parsed host and port) and Login Start. What happened is recorded for tests.
 */
public class GuiConnecting {
    private static final AtomicInteger field_146372_a = new AtomicInteger(0);
    private volatile NetworkManager field_146371_g;
    private volatile boolean field_146373_h;
    public final CountDownLatch done = new CountDownLatch(1);
    public volatile InetAddress resolved;
    public volatile Throwable error;
    public volatile String handshakeHost;
    public volatile int handshakePort;

    public GuiConnecting(ServerData data) {
        ServerAddress sa = ServerAddress.func_78860_a(data.field_78845_b);
        func_146367_a(sa.func_78861_a(), sa.func_78864_b());
    }

    public NetworkManager manager() {
        return field_146371_g;
    }

    /** The "Cancel" button. */
    public void cancel() {
        field_146373_h = true;
        if (field_146371_g != null) {
            field_146371_g.close();
        }
    }

    private void func_146367_a(final String host, final int port) {
        new Thread("Server Connector #" + field_146372_a.incrementAndGet()) {
            @Override
            public void run() {
                InetAddress address = null;
                try {
                    if (field_146373_h) {
                        return;
                    }
                    address = InetAddress.getByName(host);
                    resolved = address;
                    field_146371_g = NetworkManager.func_150726_a(address, port);
                    handshakeHost = host;
                    handshakePort = port;
                    field_146371_g.func_150725_a(NetworkManager.handshake(host, port, 2), NetworkManager.loginStart("Steve"));
                } catch (UnknownHostException e) {
                    error = e;
                } catch (Exception e) {
                    error = e;
                } finally {
                    done.countDown();
                }
            }
        }.start();
    }
}
