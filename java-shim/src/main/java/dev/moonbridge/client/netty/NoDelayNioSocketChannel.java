package dev.moonbridge.client.netty;

import dev.moonbridge.client.Routes;
import io.netty.channel.socket.nio.NioSocketChannel;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;

/**
 * The game's NIO client channel with TCP_NODELAY on. The 1.7.10 client turns Nagle's algorithm on
 * ({@code TCP_NODELAY false}) while setting the channel up; this class sets it back to true just before
 * connecting, which is after the game's channel initializer has run.
 *
 * <p>It never connects to a MoonBridge placeholder address ({@link Routes#isPlaceholder}): should one reach a
 * plain connection (a route that no longer applies), the host name it carries is resolved for real first.
 */
public class NoDelayNioSocketChannel extends NioSocketChannel {
    public NoDelayNioSocketChannel() {
        super();
    }

    @Override
    protected boolean doConnect(SocketAddress remoteAddress, SocketAddress localAddress) throws Exception {
        config().setTcpNoDelay(true);
        return super.doConnect(realAddress(remoteAddress), localAddress);
    }

    /** {@code address}, or for a placeholder the real address of the host it names. */
    public static SocketAddress realAddress(SocketAddress address) throws java.net.UnknownHostException {
        if (address instanceof InetSocketAddress) {
            InetSocketAddress isa = (InetSocketAddress) address;
            String host = Routes.hostOf(isa.getAddress());
            // Only an address MoonBridge made (a host name and a known placeholder): a typed 0.x.y.z is left alone.
            if (host != null && Routes.placeholderIntent(isa.getAddress()) != null) {
                return new InetSocketAddress(InetAddress.getByName(host), isa.getPort());
            }
        }
        return address;
    }
}
