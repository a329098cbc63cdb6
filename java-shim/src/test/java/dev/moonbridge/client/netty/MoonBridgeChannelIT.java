package dev.moonbridge.client.netty;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.moonbridge.client.Routes;
import dev.moonbridge.client.TestPeers;
import io.netty.bootstrap.Bootstrap;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.SimpleChannelInboundHandler;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.handler.codec.ByteToMessageDecoder;
import io.netty.handler.codec.MessageToByteEncoder;
import io.netty.handler.timeout.ReadTimeoutHandler;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * MoonBridgeChannel in a real Netty 4.0.10.Final pipeline on an NioEventLoopGroup, as the 1.7.10 client builds
 * it (read timeout, VarInt splitter and prepender, a packet handler; IP_TOS and TCP_NODELAY options), through
 * the real moonbridge proxy over wss to a real node-minecraft-protocol 1.7.10 backend. A 20 Hz tick thread
 * plays the game thread: it writes each tick's packets and then calls {@link MoonBridgeChannel#endTickAll()}.
 */
@Timeout(120)
class MoonBridgeChannelIT {
    static TestPeers peers;
    static NioEventLoopGroup group;
    Ticker ticker;

    @BeforeAll
    static void start() throws Exception {
        // No backend Keep Alives, so the proxy's message count is exactly what the test sends.
        peers = TestPeers.start("{\"port\":0,\"keepAlive\":false}");
        group = new NioEventLoopGroup(1);
        Routes.clear();
        Routes.putConfig("mc.example.com", 25565, peers.wssUrl());
        Routes.setDefaultOptions("{\"ca_file\":" + json(peers.ca.toString()) + "}");
    }

    @AfterAll
    static void stop() {
        if (group != null) {
            group.shutdownGracefully(0, 1, TimeUnit.SECONDS);
        }
        if (peers != null) {
            peers.close();
        }
    }

    @AfterEach
    void stopTicker() {
        if (ticker != null) {
            ticker.interrupt();
        }
    }

    static String json(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    // ---- 1.7.10-style codecs -------------------------------------------------------------------------

    static void writeVarInt(ByteBuf out, int v) {
        while ((v & ~0x7f) != 0) {
            out.writeByte((v & 0x7f) | 0x80);
            v >>>= 7;
        }
        out.writeByte(v);
    }

    static int readVarInt(ByteBuf in) {
        int v = 0;
        for (int i = 0; i < 5; i++) {
            int b = in.readByte() & 0xff;
            v |= (b & 0x7f) << (7 * i);
            if ((b & 0x80) == 0) {
                return v;
            }
        }
        throw new IllegalStateException("VarInt too long");
    }

    static void writeString(ByteBuf out, String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        writeVarInt(out, b.length);
        out.writeBytes(b);
    }

    static String readString(ByteBuf in) {
        int n = readVarInt(in);
        byte[] b = new byte[n];
        in.readBytes(b);
        return new String(b, StandardCharsets.UTF_8);
    }

    /** The frame splitter (MessageDeserializer2): a 3-byte VarInt length, then the frame. */
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
                int b = in.readByte() & 0xff;
                len |= (b & 0x7f) << (7 * i);
                if ((b & 0x80) == 0) {
                    if (in.readableBytes() < len) {
                        in.resetReaderIndex();
                        return;
                    }
                    out.add(in.readBytes(len));
                    return;
                }
            }
            throw new IllegalStateException("length wider than 21 bits");
        }
    }

    /** The frame prepender (MessageSerializer2). */
    static final class Prepender extends MessageToByteEncoder<ByteBuf> {
        @Override
        protected void encode(ChannelHandlerContext ctx, ByteBuf msg, ByteBuf out) {
            writeVarInt(out, msg.readableBytes());
            out.writeBytes(msg);
        }
    }

    static ByteBuf packet(int id, ByteBuf fields) {
        ByteBuf b = Unpooled.buffer();
        writeVarInt(b, id);
        b.writeBytes(fields);
        fields.release();
        return b;
    }

    /** What the packet handler saw. */
    static final class Events extends SimpleChannelInboundHandler<ByteBuf> {
        final BlockingQueue<String> events = new LinkedBlockingQueue<>();
        final AtomicInteger inactive = new AtomicInteger();
        final AtomicInteger burst = new AtomicInteger();
        volatile boolean play;

        @Override
        public void channelActive(ChannelHandlerContext ctx) {
            events.add("active");
        }

        @Override
        public void channelInactive(ChannelHandlerContext ctx) {
            inactive.incrementAndGet();
            events.add("inactive");
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            events.add("exception " + cause);
        }

        @Override
        protected void channelRead0(ChannelHandlerContext ctx, ByteBuf frame) {
            int id = readVarInt(frame);
            if (!play) {
                if (id == 0x02) {
                    play = true;
                    events.add("login " + readString(frame) + " " + readString(frame));
                }
                return;
            }
            switch (id) {
                case 0x01:
                    events.add("join");
                    break;
                case 0x02:
                    events.add("chat " + readString(frame));
                    break;
                case 0x3f: {
                    String channel = readString(frame);
                    byte[] data = new byte[frame.readShort()];
                    frame.readBytes(data);
                    if (channel.equals("MB|Burst")) {
                        int n = burst.getAndIncrement();
                        byte[] want = new byte[30000];
                        for (int i = 0; i < want.length; i++) {
                            want[i] = (byte) ((n * 131 + i * 7 + (i >> 8)) & 0xff);
                        }
                        if (!java.util.Arrays.equals(want, data)) {
                            events.add("burst mismatch " + n);
                        } else if (n == 69) {
                            events.add("burst complete");
                        }
                    }
                    break;
                }
                case 0x40:
                    events.add("kick " + readString(frame));
                    break;
                default:
                    break;
            }
        }

        String next(String prefix) throws InterruptedException {
            while (true) {
                String e = events.poll(30, TimeUnit.SECONDS);
                assertNotNull(e, "no event starting " + prefix);
                assertTrue(!e.startsWith("exception") && !e.startsWith("burst mismatch"), e);
                if (e.startsWith(prefix)) {
                    return e;
                }
            }
        }
    }

    /** Plays the game thread: 20 ticks a second, each running the queued actions, then ending the tick. */
    static final class Ticker extends Thread {
        final BlockingQueue<Runnable> perTick = new LinkedBlockingQueue<>();
        final AtomicInteger ticks = new AtomicInteger();

        Ticker() {
            super("test client tick");
            setDaemon(true);
        }

        @Override
        public void run() {
            long next = System.nanoTime();
            while (!isInterrupted()) {
                Runnable r = perTick.poll();
                if (r != null) {
                    r.run();
                }
                MoonBridgeChannel.endTickAll();
                ticks.incrementAndGet();
                next += 50_000_000L;
                long wait = next - System.nanoTime();
                if (wait > 0) {
                    try {
                        Thread.sleep(wait / 1_000_000L, (int) (wait % 1_000_000L));
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }
        }
    }

    Channel connect(Events events) throws Exception {
        Bootstrap b = new Bootstrap().group(group).channel(MoonBridgeChannel.class).handler(new ChannelInitializer<Channel>() {
            @Override
            protected void initChannel(Channel ch) {
                ch.config().setOption(ChannelOption.IP_TOS, 24);
                ch.config().setOption(ChannelOption.TCP_NODELAY, false);
                ch.pipeline().addLast("timeout", new ReadTimeoutHandler(20)).addLast("splitter", new Splitter())
                        .addLast("prepender", new Prepender()).addLast("packet_handler", events);
            }
        });
        // As the game does after MoonBridgeHooks.resolve: a placeholder address that carries the host name.
        Channel ch = b.connect(InetAddress.getByAddress("mc.example.com", new byte[4]), 25565).syncUninterruptibly().channel();
        assertTrue(ch instanceof MoonBridgeChannel);
        return ch;
    }

    void logIn(Channel ch, Events events, String name) throws Exception {
        ticker.perTick.add(() -> {
            ByteBuf hs = Unpooled.buffer();
            writeVarInt(hs, 5);
            writeString(hs, "mc.example.com\0FML\0");
            hs.writeShort(25565);
            writeVarInt(hs, 2);
            ch.writeAndFlush(packet(0x00, hs));
            ByteBuf ls = Unpooled.buffer();
            writeString(ls, name);
            ch.writeAndFlush(packet(0x00, ls));
        });
        assertEquals("login", events.next("login").substring(0, 5));
        events.next("join");
    }

    @Test
    void playsThroughThePipelineWithOneMessagePerTick() throws Exception {
        ticker = new Ticker();
        ticker.start();
        Events events = new Events();
        Channel ch = connect(events);
        assertEquals("active", events.next("active"));
        logIn(ch, events, "NettyOne");
        events.next("burst complete");
        assertEquals(70, events.burst.get());
        ticker.perTick.add(() -> {
            ByteBuf chat = Unpooled.buffer();
            writeString(chat, "hello from netty");
            ch.writeAndFlush(packet(0x01, chat));
        });
        assertEquals("chat {\"text\":\"echo:hello from netty\"}", events.next("chat"));

        // Twenty ticks of three packets each (C17 plugin message, C04 position, C03 on ground), each packet
        // written and flushed on its own, as the game does.
        final int ticks = 20;
        for (int t = 0; t < ticks; t++) {
            final int seq = t;
            ticker.perTick.add(() -> {
                ByteBuf c17 = Unpooled.buffer();
                writeString(c17, "MB|Test");
                c17.writeShort(4);
                c17.writeInt(seq);
                ch.writeAndFlush(packet(0x17, c17));
                ByteBuf c04 = Unpooled.buffer();
                c04.writeDouble(1).writeDouble(65.62).writeDouble(64).writeDouble(2).writeBoolean(true);
                ch.writeAndFlush(packet(0x04, c04));
                ByteBuf c03 = Unpooled.buffer();
                c03.writeBoolean(true);
                ch.writeAndFlush(packet(0x03, c03));
            });
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!ticker.perTick.isEmpty() && System.nanoTime() < deadline) {
            Thread.sleep(10); // polling the queue of test actions, bounded by the deadline
        }
        assertTrue(ticker.perTick.isEmpty());
        int after = ticker.ticks.get();
        while (ticker.ticks.get() < after + 2) {
            Thread.sleep(10); // two more ticks: the last batch has been ended
        }

        // Close from this side: channelInactive once, and the proxy counts the messages it read.
        ch.close().syncUninterruptibly();
        events.next("inactive");
        String ended = peers.waitProxyLine("player=\"NettyOne\"", 20);
        Matcher m = Pattern.compile("ws_messages_in=(\\d+)").matcher(ended);
        assertTrue(m.find(), ended);
        // One message for handshake + Login Start, one for the chat, one per three-packet tick.
        assertEquals(2 + ticks, Integer.parseInt(m.group(1)), ended);
        assertTrue(ended.contains("reason=player closed"), ended);
        assertNotEquals("inactive", events.events.poll(300, TimeUnit.MILLISECONDS), "channelInactive fired twice");
        assertEquals(1, events.inactive.get());
        assertTrue(!ch.isOpen() && !ch.isActive());
    }

    @Test
    void aServerSideCloseFiresInactiveOnce() throws Exception {
        ticker = new Ticker();
        ticker.start();
        Events events = new Events();
        Channel ch = connect(events);
        logIn(ch, events, "NettyTwo");
        events.next("burst complete");
        ticker.perTick.add(() -> {
            ByteBuf chat = Unpooled.buffer();
            writeString(chat, "bye");
            ch.writeAndFlush(packet(0x01, chat));
        });
        assertTrue(events.next("kick").contains("Bye from the backend"));
        events.next("inactive");
        ch.closeFuture().await(10, TimeUnit.SECONDS);
        assertTrue(!ch.isOpen());
        assertNotEquals("inactive", events.events.poll(300, TimeUnit.MILLISECONDS), "channelInactive fired twice");
        assertEquals(1, events.inactive.get());
        assertEquals(0, MoonBridgeChannel.openCount());
    }

    @Test
    void autoReadOffHoldsDataUntilReadIsCalled() throws Exception {
        ticker = new Ticker();
        ticker.start();
        Events events = new Events();
        Channel ch = connect(events);
        logIn(ch, events, "NettyThree");
        events.next("burst complete");
        ch.eventLoop().submit(() -> ch.config().setAutoRead(false)).sync();
        // As with Netty 4.0.10's NIO channel, the read() requested before auto-read went off still lets one
        // batch through; after it, nothing reaches the pipeline until the next read().
        ticker.perTick.add(() -> {
            ByteBuf chat = Unpooled.buffer();
            writeString(chat, "first");
            ch.writeAndFlush(packet(0x01, chat));
        });
        assertEquals("chat {\"text\":\"echo:first\"}", events.next("chat"));
        ticker.perTick.add(() -> {
            ByteBuf chat = Unpooled.buffer();
            writeString(chat, "held");
            ch.writeAndFlush(packet(0x01, chat));
        });
        assertEquals(null, events.events.poll(700, TimeUnit.MILLISECONDS), "read while autoRead was off");
        ch.read();
        assertEquals("chat {\"text\":\"echo:held\"}", events.next("chat"));
        ch.close().syncUninterruptibly();
    }

    @Test
    void closingDuringConnectFailsTheConnectAtOnce() throws Exception {
        // A server that accepts TCP and never answers the WebSocket upgrade: the native connect waits.
        try (java.net.ServerSocket silent = new java.net.ServerSocket(0)) {
            java.util.List<java.net.Socket> held = new java.util.concurrent.CopyOnWriteArrayList<>();
            Thread acceptor = new Thread(() -> {
                try {
                    while (true) {
                        held.add(silent.accept());
                    }
                } catch (java.io.IOException ignored) {
                    // closed
                }
            });
            acceptor.setDaemon(true);
            acceptor.start();
            Routes.putConfig("slow.example.com", 25565, "ws://127.0.0.1:" + silent.getLocalPort() + "/mc");
            Bootstrap b = new Bootstrap().group(group).channel(MoonBridgeChannel.class).handler(new Events());
            io.netty.channel.ChannelFuture f = b.connect(InetAddress.getByAddress("slow.example.com", new byte[4]), 25565);
            f.channel().close().syncUninterruptibly();
            assertTrue(f.await(2, TimeUnit.SECONDS), "the connect completes when the channel closes");
            assertTrue(f.cause() instanceof java.nio.channels.ClosedChannelException, String.valueOf(f.cause()));
            for (java.net.Socket s : held) {
                s.close();
            }
        }
    }

    @Test
    void anUnroutedAddressFailsTheConnectClearly() throws Exception {
        Bootstrap b = new Bootstrap().group(group).channel(MoonBridgeChannel.class).handler(new Events());
        Throwable cause = b.connect(InetAddress.getByAddress("unrouted.example.com", new byte[4]), 25565)
                .awaitUninterruptibly().cause();
        assertTrue(cause instanceof MoonBridgeConnectException, String.valueOf(cause));
        assertTrue(cause.toString().contains("no ws:// or wss:// route for unrouted.example.com:25565"), cause.toString());
    }

    // ---- Case C24: lifecycle races -------------------------------------------------------------------

    /** The order of channelActive and channelInactive (exceptions from the server's close are expected). */
    static final class Lifecycle extends SimpleChannelInboundHandler<ByteBuf> {
        final List<String> order = new java.util.concurrent.CopyOnWriteArrayList<>();

        @Override
        public void channelActive(ChannelHandlerContext ctx) {
            order.add("active");
        }

        @Override
        public void channelInactive(ChannelHandlerContext ctx) {
            order.add("inactive");
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            // the server closing with 1011 reaches the pipeline as an exception: part of the race
        }

        @Override
        protected void channelRead0(ChannelHandlerContext ctx, ByteBuf frame) {}
    }

    /** A backend of the test's own: accepts connections and hands each socket to {@code after}. */
    static java.net.ServerSocket rawBackend(java.util.function.Consumer<java.net.Socket> after) throws Exception {
        java.net.ServerSocket server = new java.net.ServerSocket(0, 200, InetAddress.getByName("127.0.0.1"));
        Thread t = new Thread(() -> {
            while (!server.isClosed()) {
                try {
                    java.net.Socket s = server.accept();
                    Thread c = new Thread(() -> after.accept(s), "raw backend connection");
                    c.setDaemon(true);
                    c.start();
                } catch (java.io.IOException e) {
                    return;
                }
            }
        }, "raw backend");
        t.setDaemon(true);
        t.start();
        return server;
    }

    static byte[] loginBytes(String name) {
        ByteBuf hs = Unpooled.buffer();
        writeVarInt(hs, 5);
        writeString(hs, "mc.example.com");
        hs.writeShort(25565);
        writeVarInt(hs, 2);
        ByteBuf ls = Unpooled.buffer();
        writeString(ls, name);
        ByteBuf all = Unpooled.buffer();
        for (ByteBuf p : new ByteBuf[] {packet(0x00, hs), packet(0x00, ls)}) {
            writeVarInt(all, p.readableBytes());
            all.writeBytes(p);
        }
        byte[] b = new byte[all.readableBytes()];
        all.readBytes(b);
        return b;
    }

    static Bootstrap plainBootstrap(io.netty.channel.ChannelHandler handler) {
        return new Bootstrap().group(group).channel(MoonBridgeChannel.class).handler(new ChannelInitializer<Channel>() {
            @Override
            protected void initChannel(Channel ch) {
                ch.pipeline().addLast("splitter", new Splitter()).addLast("packet_handler", handler);
            }
        });
    }

    @Test
    void c24aAServerCloseRacingTheGamesCloseFiresInactiveExactlyOnceAfterActive() throws Exception {
        // The backend ends every session as soon as the login arrives: the proxy then closes the WebSocket,
        // while the game closes the channel too.
        try (java.net.ServerSocket backend = rawBackend(s -> {
            try {
                s.getInputStream().read(new byte[64]);
                s.close();
            } catch (java.io.IOException ignored) {
                // gone
            }
        }); TestPeers proxy = TestPeers.startForBackend(backend.getLocalPort())) {
            Routes.putConfig("race.example.com", 25565, proxy.wsUrl());
            java.util.Random jitter = new java.util.Random(24);
            byte[] login = loginBytes("Racer");
            for (int i = 0; i < 1000; i++) {
                Lifecycle events = new Lifecycle();
                Channel ch = plainBootstrap(events)
                        .connect(InetAddress.getByAddress("race.example.com", new byte[] {127, 0, 0, 1}), 25565)
                        .syncUninterruptibly().channel();
                ch.writeAndFlush(Unpooled.wrappedBuffer(login));
                ((MoonBridgeChannel) ch).endTick();
                java.util.concurrent.locks.LockSupport.parkNanos(jitter.nextInt(3_000_000)); // vary the interleaving
                ch.close();
                assertTrue(ch.closeFuture().await(10, TimeUnit.SECONDS), "closed, round " + i);
                // channelInactive runs as a task after the close: once the loop has run a later task, it is in.
                ch.eventLoop().submit(() -> { }).syncUninterruptibly();
                ch.eventLoop().submit(() -> { }).syncUninterruptibly();
                assertEquals(java.util.Arrays.asList("active", "inactive"), events.order, "round " + i);
            }
            assertEquals(0, MoonBridgeChannel.openCount());
        }
    }

    /** Live Java threads whose name starts with {@code prefix}. */
    static int javaThreadsNamed(String prefix) {
        int n = 0;
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.isAlive() && t.getName().startsWith(prefix)) {
                n++;
            }
        }
        return n;
    }

    /**
     * Native threads of this process whose name starts with {@code prefix} (Linux: /proc/self/task/N/comm, at
     * most 15 characters: the Rust I/O threads are "moonbridge-io").
     */
    static int threadsNamed(String prefix) throws java.io.IOException {
        int n = 0;
        java.io.File[] tasks = new java.io.File("/proc/self/task").listFiles();
        for (java.io.File t : tasks == null ? new java.io.File[0] : tasks) {
            try {
                String comm = new String(java.nio.file.Files.readAllBytes(new java.io.File(t, "comm").toPath()),
                        StandardCharsets.UTF_8).trim();
                if (comm.startsWith(prefix)) {
                    n++;
                }
            } catch (java.io.IOException ignored) {
                // the thread ended meanwhile
            }
        }
        return n;
    }

    @Test
    void c24bCancelWhileTheTlsHandshakeIsStalled() throws Exception {
        // A listener that accepts TCP and never answers the ClientHello.
        try (java.net.ServerSocket stalled = rawBackend(s -> {
            try {
                s.getInputStream().read(new byte[4096]);
                Thread.sleep(30_000); // holds the connection open, silent (the test's own peer, not a wait)
            } catch (Exception ignored) {
                // closed
            }
        })) {
            // Connections of earlier tests finish closing in the background first: then this test's connect is
            // the only native I/O thread.
            long settled = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (threadsNamed("moonbridge-io") > 0) {
                assertTrue(System.nanoTime() < settled, "earlier connections closed");
                Thread.sleep(20); // polling the thread count, bounded by the deadline
            }
            Routes.putConfig("stalled.example.com", 25565, "wss://127.0.0.1:" + stalled.getLocalPort() + "/mc");
            String before = Routes.defaultOptions();
            Routes.setDefaultOptions("{\"connect_timeout_ms\":1500}");
            try {
                Events events = new Events();
                io.netty.channel.ChannelFuture f = plainBootstrap(events)
                        .connect(InetAddress.getByAddress("stalled.example.com", new byte[] {127, 0, 0, 1}), 25565);
                // Wait until the native connect is under way (its I/O thread exists), as when the player clicks.
                long started = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (threadsNamed("moonbridge-io") == 0 || javaThreadsNamed("MoonBridge connect") == 0) {
                    assertTrue(System.nanoTime() < started, "the native connect started");
                    Thread.sleep(5); // polling the thread count, bounded by the deadline
                }
                assertTrue(f.cancel(false), "Cancel on Connecting...");
                assertTrue(f.isCancelled());
                assertTrue(f.channel().closeFuture().await(5, TimeUnit.SECONDS), "the channel closes at once");
                long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1500 + 3000);
                while (threadsNamed("moonbridge-io") > 0 || javaThreadsNamed("MoonBridge connect") > 0) {
                    assertTrue(System.nanoTime() < deadline, "the native I/O thread and the connector end within the connect timeout");
                    Thread.sleep(20); // polling thread counts, bounded by the deadline
                }
                assertEquals(null, events.events.poll(200, TimeUnit.MILLISECONDS), "no channelActive, no channelInactive");
                assertEquals(0, MoonBridgeChannel.openCount());
            } finally {
                Routes.setDefaultOptions(before);
            }
        }
    }

    @Test
    void c24cAWriteAfterCloseFailsWithClosedChannelException() throws Exception {
        ticker = new Ticker();
        ticker.start();
        Events events = new Events();
        Channel ch = connect(events);
        logIn(ch, events, "NettyLate");
        ch.close().syncUninterruptibly();
        io.netty.channel.ChannelFuture w = ch.writeAndFlush(Unpooled.wrappedBuffer(new byte[] {2, 0, 1}));
        assertTrue(w.await(5, TimeUnit.SECONDS));
        assertTrue(w.cause() instanceof java.nio.channels.ClosedChannelException, String.valueOf(w.cause()));
        ((MoonBridgeChannel) ch).endTick(); // the game's tick after the close: nothing happens
        MoonBridgeChannel.endTickAll();
        events.next("inactive"); // Netty fires it on the event loop after the close promise completes
        assertNotEquals("inactive", events.events.poll(300, TimeUnit.MILLISECONDS), "channelInactive fired twice");
        assertEquals(1, events.inactive.get());
    }

    @Test
    void keepAliveRepliesLeaveAtOnceNotAtTheNextTick() throws Exception {
        // The backend logs the player in, then sends ten Keep Alives one at a time and times each reply.
        final BlockingQueue<Long> replyNanos = new LinkedBlockingQueue<>();
        try (java.net.ServerSocket backend = rawBackend(s -> {
            try {
                java.io.DataInputStream in = new java.io.DataInputStream(s.getInputStream());
                java.io.OutputStream out = s.getOutputStream();
                in.readFully(new byte[loginBytes("Pinger").length]);
                ByteBuf success = Unpooled.buffer();
                writeString(success, "00000000-0000-3000-8000-000000000000");
                writeString(success, "Pinger");
                ByteBuf frame = Unpooled.buffer();
                ByteBuf p = packet(0x02, success);
                writeVarInt(frame, p.readableBytes());
                frame.writeBytes(p);
                out.write(frame.array(), frame.arrayOffset(), frame.readableBytes());
                for (int i = 0; i < 10; i++) {
                    long t = System.nanoTime();
                    out.write(new byte[] {5, 0, 0, 0, 0, (byte) i});
                    out.flush();
                    byte[] reply = new byte[6];
                    in.readFully(reply);
                    replyNanos.add(System.nanoTime() - t);
                }
            } catch (java.io.IOException ignored) {
                // the test ended
            }
        }); TestPeers proxy = TestPeers.startForBackend(backend.getLocalPort())) {
            Routes.putConfig("keepalive.example.com", 25565, proxy.wsUrl());
            // The packet handler answers Keep Alive while it handles it, on the Netty thread, as 1.7.10 does.
            SimpleChannelInboundHandler<ByteBuf> game = new SimpleChannelInboundHandler<ByteBuf>() {
                @Override
                protected void channelRead0(ChannelHandlerContext ctx, ByteBuf f) {
                    ByteBuf copy = Unpooled.buffer();
                    copy.writeBytes(f, f.readerIndex(), f.readableBytes());
                    if (readVarInt(f) == 0x00) {
                        ByteBuf reply = Unpooled.buffer();
                        writeVarInt(reply, copy.readableBytes());
                        reply.writeBytes(copy);
                        ctx.writeAndFlush(reply);
                    }
                }
            };
            Channel ch = plainBootstrap(game)
                    .connect(InetAddress.getByAddress("keepalive.example.com", new byte[] {127, 0, 0, 1}), 25565)
                    .syncUninterruptibly().channel();
            ch.writeAndFlush(Unpooled.wrappedBuffer(loginBytes("Pinger")));
            ((MoonBridgeChannel) ch).endTick();
            long[] took = new long[10];
            for (int i = 0; i < 10; i++) {
                Long n = replyNanos.poll(20, TimeUnit.SECONDS);
                assertNotNull(n, "Keep Alive reply " + i);
                took[i] = n;
            }
            java.util.Arrays.sort(took);
            // No game tick runs here: before this change each reply waited max_delay_ms (50 ms).
            assertTrue(took[5] < TimeUnit.MILLISECONDS.toNanos(10), "median reply " + took[5] / 1e6 + " ms");
            assertTrue(took[9] < TimeUnit.MILLISECONDS.toNanos(40), "slowest reply " + took[9] / 1e6 + " ms");
            ch.close().syncUninterruptibly();
        }
    }
}
