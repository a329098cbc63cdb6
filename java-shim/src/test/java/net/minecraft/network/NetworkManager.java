package net.minecraft.network;

import io.netty.bootstrap.Bootstrap;
import io.netty.channel.Channel;
import io.netty.channel.ChannelException;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.SimpleChannelInboundHandler;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.nio.NioSocketChannel;
import java.net.InetAddress;

/**
 * Test fixture with the name, descriptor and bytecode shape of 1.7.10's {@code NetworkManager.func_150726_a}
 * (provideLanClient): a Bootstrap on the shared NIO group whose initializer sets IP_TOS 24 and TCP_NODELAY
 * false, {@code .channel(NioSocketChannel.class)}, then {@code connect(address, port).syncUninterruptibly()}.
 * Written for the tests; it records the channel it created.
 */
public class NetworkManager extends SimpleChannelInboundHandler<Object> {
    public static final NioEventLoopGroup eventLoops = new NioEventLoopGroup(1);
    public static volatile Channel lastChannel;

    public NetworkManager(boolean clientSide) {}

    public static NetworkManager func_150726_a(InetAddress address, int port) {
        final NetworkManager manager = new NetworkManager(true);
        ((Bootstrap) ((Bootstrap) ((Bootstrap) new Bootstrap().group(eventLoops)).handler(new ChannelInitializer<Channel>() {
            @Override
            protected void initChannel(Channel channel) {
                try {
                    channel.config().setOption(ChannelOption.IP_TOS, Integer.valueOf(24));
                } catch (ChannelException e) {
                    // ignored, as the game does
                }
                try {
                    channel.config().setOption(ChannelOption.TCP_NODELAY, Boolean.valueOf(false));
                } catch (ChannelException e) {
                    // ignored, as the game does
                }
                lastChannel = channel;
                channel.pipeline().addLast("packet_handler", manager);
            }
        })).channel(NioSocketChannel.class)).connect(address, port).syncUninterruptibly();
        return manager;
    }

    @Override
    protected void channelRead0(ChannelHandlerContext ctx, Object msg) {}
}
