package dev.moonbridge.client.netty;

import io.netty.channel.socket.nio.NioSocketChannel;
import java.net.SocketAddress;

/**
 * The game's NIO client channel with TCP_NODELAY on. The 1.7.10 client turns Nagle's algorithm on
 * ({@code TCP_NODELAY false}) while setting the channel up; this class sets it back to true just before
 * connecting, which is after the game's channel initializer has run.
 */
public class NoDelayNioSocketChannel extends NioSocketChannel {
    public NoDelayNioSocketChannel() {
        super();
    }

    @Override
    protected boolean doConnect(SocketAddress remoteAddress, SocketAddress localAddress) throws Exception {
        config().setTcpNoDelay(true);
        return super.doConnect(remoteAddress, localAddress);
    }
}
