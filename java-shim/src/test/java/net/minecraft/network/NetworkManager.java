package net.minecraft.network;

import io.netty.bootstrap.Bootstrap;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelException;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.SimpleChannelInboundHandler;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.nio.NioSocketChannel;
import io.netty.handler.codec.ByteToMessageDecoder;
import java.io.ByteArrayOutputStream;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Test fixture with the name, descriptor and bytecode shape of 1.7.10's {@code NetworkManager.func_150726_a}
 * (provideLanClient): a Bootstrap on the shared NIO group whose initializer sets IP_TOS 24 and TCP_NODELAY
 * false, {@code .channel(NioSocketChannel.class)}, then {@code connect(address, port).syncUninterruptibly()}.
 *
 * <p>Its pipeline splits received frames (VarInt length) and hands each to the {@link Listener} on the Netty
 * thread, as the game does for the packets it handles at once (Keep Alive, the status answers); {@link
 * #func_150725_a} sends frames from any thread the way the game's {@code scheduleOutboundPacket} does (directly
 * on the event loop, else as a task on it). Written for the tests; it records the channel it created.
 */
public class NetworkManager extends SimpleChannelInboundHandler<ByteBuf> {
    public static final NioEventLoopGroup eventLoops = new NioEventLoopGroup(1);
    public static volatile Channel lastChannel;

    /** Receives frames (packet id and body) on the Netty thread, and the end of the connection. */
    public interface Listener {
        void frame(NetworkManager manager, int id, byte[] body);

        void closed(NetworkManager manager);
    }

    public volatile Channel channel;
    private volatile Listener listener;
    /** The packet ids received, in order (for tests). */
    public final java.util.concurrent.BlockingQueue<Integer> receivedIds = new java.util.concurrent.LinkedBlockingQueue<Integer>();

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
                manager.channel = channel;
                channel.pipeline().addLast("splitter", new Splitter()).addLast("packet_handler", manager);
            }
        })).channel(NioSocketChannel.class)).connect(address, port).syncUninterruptibly();
        return manager;
    }

    public void setListener(Listener l) {
        this.listener = l;
    }

    /** Sends frames as one write each, flushed, from any thread (on the event loop, as the game does). */
    public void func_150725_a(final byte[]... frames) {
        final Channel ch = channel;
        Runnable send = new Runnable() {
            @Override
            public void run() {
                for (byte[] f : frames) {
                    ch.writeAndFlush(Unpooled.wrappedBuffer(f));
                }
            }
        };
        if (ch.eventLoop().inEventLoop()) {
            send.run();
        } else {
            ch.eventLoop().execute(send);
        }
    }

    public void close() {
        Channel ch = channel;
        if (ch != null) {
            ch.close();
        }
    }

    @Override
    protected void channelRead0(ChannelHandlerContext ctx, ByteBuf frame) {
        int id = readVarInt(frame);
        receivedIds.add(id);
        byte[] body = new byte[frame.readableBytes()];
        frame.readBytes(body);
        Listener l = listener;
        if (l != null) {
            l.frame(this, id, body);
        }
    }

    @Override
    public void channelInactive(ChannelHandlerContext ctx) {
        Listener l = listener;
        if (l != null) {
            l.closed(this);
        }
    }

    static int readVarInt(ByteBuf b) {
        int v = 0;
        for (int i = 0; i < 5; i++) {
            int x = b.readByte();
            v |= (x & 0x7f) << (7 * i);
            if ((x & 0x80) == 0) {
                break;
            }
        }
        return v;
    }

    /** VarInt-length frames out of the byte stream. */
    static final class Splitter extends ByteToMessageDecoder {
        @Override
        protected void decode(ChannelHandlerContext ctx, ByteBuf in, List<Object> out) {
            in.markReaderIndex();
            int len = 0;
            for (int i = 0; i < 3; i++) {
                if (!in.isReadable()) {
                    in.resetReaderIndex();
                    return;
                }
                int x = in.readByte();
                len |= (x & 0x7f) << (7 * i);
                if ((x & 0x80) == 0) {
                    if (in.readableBytes() < len) {
                        in.resetReaderIndex();
                        return;
                    }
                    out.add(in.readBytes(len));
                    return;
                }
            }
            throw new IllegalStateException("frame length longer than 3 bytes");
        }
    }

    // Protocol 5 frames the fixtures send.

    static void varInt(ByteArrayOutputStream out, int v) {
        while ((v & ~0x7f) != 0) {
            out.write((v & 0x7f) | 0x80);
            v >>>= 7;
        }
        out.write(v);
    }

    static void string(ByteArrayOutputStream out, String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        varInt(out, b.length);
        out.write(b, 0, b.length);
    }

    public static byte[] frame(int id, byte[] fields) {
        ByteArrayOutputStream body = new ByteArrayOutputStream();
        varInt(body, id);
        body.write(fields, 0, fields.length);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        varInt(out, body.size());
        byte[] b = body.toByteArray();
        out.write(b, 0, b.length);
        return out.toByteArray();
    }

    /** C00 Handshake: protocol 5, host, port, next state (1 status, 2 login). */
    public static byte[] handshake(String host, int port, int nextState) {
        ByteArrayOutputStream f = new ByteArrayOutputStream();
        varInt(f, 5);
        string(f, host);
        f.write(port >>> 8);
        f.write(port & 0xff);
        varInt(f, nextState);
        return frame(0x00, f.toByteArray());
    }

    /** C00 Login Start. */
    public static byte[] loginStart(String name) {
        ByteArrayOutputStream f = new ByteArrayOutputStream();
        string(f, name);
        return frame(0x00, f.toByteArray());
    }

    /** C00 Status Request (status state). */
    public static byte[] statusRequest() {
        return frame(0x00, new byte[0]);
    }

    /** C01 Ping (status state): a long. */
    public static byte[] ping(long payload) {
        byte[] b = new byte[8];
        for (int i = 0; i < 8; i++) {
            b[i] = (byte) (payload >>> (56 - 8 * i));
        }
        return frame(0x01, b);
    }
}
