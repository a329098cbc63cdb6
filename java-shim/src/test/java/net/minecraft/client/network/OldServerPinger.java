package net.minecraft.client.network;

import io.netty.bootstrap.Bootstrap;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.socket.nio.NioSocketChannel;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import net.minecraft.client.multiplayer.ServerAddress;
import net.minecraft.client.multiplayer.ServerData;
import net.minecraft.network.NetworkManager;

/**
 * Test fixture with the names, descriptors and flow of 1.7.10's {@code OldServerPinger}:
 * {@code func_147224_a(ServerData)} parses the entry, resolves the host with {@code InetAddress.getByName},
 * opens {@code NetworkManager.func_150726_a}, sends the handshake (next state status) and Status Request; when
 * the Status Response arrives (handled at once on the Netty thread, as the game does) it sends a Ping with the
 * time, and the Pong sets the entry's ping time. A connection that ends without an answer falls back to the
 * private {@code func_147225_b(ServerData)}, the 1.6 ping over its own Bootstrap
 * ({@code connect(host, port)} with the {@code String} overload), called through the listener's synthetic
 * accessor.
 */
public class OldServerPinger {
    public volatile InetAddress lastAddress;
    public volatile int lastPort;
    public volatile ChannelFuture legacyConnect;
    public volatile NetworkManager lastManager;
    public final CountDownLatch finished = new CountDownLatch(1);

    public void func_147224_a(final ServerData server) throws UnknownHostException {
        ServerAddress address = ServerAddress.func_78860_a(server.field_78845_b);
        lastAddress = InetAddress.getByName(address.func_78861_a());
        lastPort = address.func_78864_b();
        final NetworkManager manager = NetworkManager.func_150726_a(lastAddress, lastPort);
        lastManager = manager;
        server.field_78844_e = -1L;
        manager.setListener(new NetworkManager.Listener() {
            private boolean answered;
            private long sentNanos;

            @Override
            public void frame(NetworkManager m, int id, byte[] body) {
                if (id == 0x00 && !answered) {
                    answered = true;
                    server.field_78843_d = new String(body, StandardCharsets.UTF_8);
                    sentNanos = System.nanoTime();
                    m.func_150725_a(NetworkManager.ping(System.currentTimeMillis()));
                } else if (id == 0x01) {
                    long nanos = System.nanoTime() - sentNanos;
                    server.pingNanos = nanos;
                    server.field_78844_e = nanos / 1_000_000L;
                    m.close();
                    finished.countDown();
                }
            }

            @Override
            public void closed(NetworkManager m) {
                if (!answered) {
                    func_147225_b(server);
                }
                finished.countDown();
            }
        });
        manager.func_150725_a(NetworkManager.handshake(address.func_78861_a(), address.func_78864_b(), 1),
                NetworkManager.statusRequest());
    }

    private void func_147225_b(final ServerData server) {
        final ServerAddress address = ServerAddress.func_78860_a(server.field_78845_b);
        legacyConnect = ((Bootstrap) ((Bootstrap) ((Bootstrap) new Bootstrap().group(NetworkManager.eventLoops))
                .handler(new ChannelInitializer<Channel>() {
                    @Override
                    protected void initChannel(Channel channel) {
                        channel.pipeline().addLast(new ChannelInboundHandlerAdapter() {
                            @Override
                            public void channelActive(ChannelHandlerContext ctx) {
                                ByteBuf ping = Unpooled.buffer();
                                ping.writeByte(0xfe).writeByte(0x01).writeByte(0xfa);
                                ctx.writeAndFlush(ping);
                            }
                        });
                    }
                })).channel(NioSocketChannel.class)).connect(address.func_78861_a(), address.func_78864_b());
    }

    /** For tests: runs the legacy ping of {@code server} as the game would after a failed status exchange. */
    public void legacyPing(ServerData server) {
        func_147225_b(server);
    }
}
