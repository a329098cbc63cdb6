package dev.moonbridge.forge;

import dev.moonbridge.client.Routes;
import dev.moonbridge.client.netty.MoonBridgeChannel;
import dev.moonbridge.client.netty.NoDelayNioSocketChannel;
import io.netty.bootstrap.Bootstrap;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.nio.NioEventLoopGroup;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;

/**
 * The hooks' half of {@code LoaderProbe}: what a player meets when the native library cannot be loaded. The
 * mod checks the library once ({@link MoonBridgeHooks#nativeAvailable()}, which logs one line), a vanilla
 * server still connects (the game's NIO channel with TCP_NODELAY), and a MoonBridge server fails with the
 * message the game shows on its error screen.
 */
public final class LoaderProbeHooks {
    private LoaderProbeHooks() {}

    public static void run(String routeUrl) throws Exception {
        // Forge gives the game a real Log4j; here the API's own simple logger prints to stderr, from INFO up.
        System.setProperty("org.apache.logging.log4j.simplelog.level", "INFO");
        System.out.println("native available: " + MoonBridgeHooks.nativeAvailable());
        NioEventLoopGroup group = new NioEventLoopGroup(1);
        try (ServerSocket vanilla = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            ChannelFuture f = bootstrap(group, NoDelayNioSocketChannel.class)
                    .connect(InetAddress.getByName("127.0.0.1"), vanilla.getLocalPort()).awaitUninterruptibly();
            try (Socket accepted = vanilla.accept()) {
                System.out.println("vanilla " + (f.isSuccess() ? "ok" : "failed: " + f.cause()));
            }
            f.channel().close().syncUninterruptibly();
            Routes.putConfig("probe.invalid", 25565, routeUrl);
            ChannelFuture mb = bootstrap(group, MoonBridgeChannel.class)
                    .connect(InetAddress.getByAddress("probe.invalid", new byte[] {127, 0, 0, 1}), 25565).awaitUninterruptibly();
            System.out.println("moonbridge " + (mb.isSuccess() ? "ok" : "failed: " + mb.cause()));
        } finally {
            group.shutdownGracefully().syncUninterruptibly();
        }
    }

    private static Bootstrap bootstrap(NioEventLoopGroup group, Class<? extends Channel> channel) {
        return new Bootstrap().group(group).channel(channel).handler(new ChannelInitializer<Channel>() {
            @Override
            protected void initChannel(Channel ch) {}
        });
    }
}
