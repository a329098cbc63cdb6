package dev.moonbridge.client.netty;

import dev.moonbridge.client.NativeTransport;
import dev.moonbridge.client.Routes;
import io.netty.buffer.ByteBuf;
import io.netty.channel.AbstractChannel;
import io.netty.channel.ChannelConfig;
import io.netty.channel.ChannelMetadata;
import io.netty.channel.ChannelOption;
import io.netty.channel.ChannelOutboundBuffer;
import io.netty.channel.ChannelPromise;
import io.netty.channel.DefaultChannelConfig;
import io.netty.channel.EventLoop;
import io.netty.channel.SingleThreadEventLoop;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.AlreadyConnectedException;
import java.nio.channels.ConnectionPendingException;
import java.nio.channels.NotYetConnectedException;
import java.util.Collections;
import java.util.Map;
import java.util.Queue;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A Netty 4.0.10 channel over {@link NativeTransport}, for the 1.7.10 client.
 *
 * <p>It registers on the game's NIO event loop (any {@link SingleThreadEventLoop}, the way {@code LocalChannel}
 * does) and keeps the game's pipeline unchanged. Connecting looks the remote host and port up in
 * {@link Routes} and opens the native transport on a helper thread, so the event loop never blocks. A reader
 * thread blocks in {@link NativeTransport#read} and hands each chunk to the event loop, which fires
 * {@code channelRead} for it and then one {@code channelReadComplete}; {@code autoRead = false} holds chunks
 * back until the next {@code read()}, as NIO does. Writes go straight to {@link NativeTransport#write} (a copy
 * into the current tick's batch) and flush is free: {@link #endTickAll()}, called once per client tick, sends
 * the tick's batch as one WebSocket message. Options the game sets for TCP (TCP_NODELAY, IP_TOS, ...) are
 * accepted and ignored.
 *
 * <p>Some writes must not wait for the tick. Replies the game writes while it handles received packets on the
 * Netty thread (Keep Alive, the server-list Ping, Forge's {@code FML|HS} handshake steps: 1.7.10 handles such
 * packets at once, see {@code Packet.func_148836_a}) leave as soon as that delivery ends, and a server-list
 * status connection (handshake next state 1, no game tick behind it) sends every write at once. Everything else
 * still leaves once per tick.
 */
public class MoonBridgeChannel extends AbstractChannel {
    /** Bytes read from the network but not yet taken by the pipeline before the reader thread waits. */
    static final long MAX_QUEUED_BYTES = 8L << 20;
    /** Largest single read handed to the pipeline. */
    static final int READ_CHUNK = 256 * 1024;

    private static final ChannelMetadata METADATA = new ChannelMetadata(false);
    private static final Set<MoonBridgeChannel> OPEN =
            Collections.newSetFromMap(new ConcurrentHashMap<MoonBridgeChannel, Boolean>());

    private static final int STATE_OPEN = 0;
    private static final int STATE_CONNECTING = 1;
    private static final int STATE_ACTIVE = 2;
    private static final int STATE_CLOSED = 3;

    private final Config config = new Config(this);
    private final Queue<ByteBuf> inbound = new ConcurrentLinkedQueue<ByteBuf>();
    private final AtomicLong queuedBytes = new AtomicLong();
    private final AtomicBoolean deliveryScheduled = new AtomicBoolean();
    private final Object readerLock = new Object();
    private volatile int state = STATE_OPEN;
    private volatile NativeTransport transport;
    private volatile InetSocketAddress remote;
    /** The route this channel connects through, once connecting. */
    private volatile Routes.Route route;
    private volatile boolean remoteClosed;
    /** The promise of a connect in progress, failed if the channel closes first (event loop only). */
    private ChannelPromise connectPromise;
    /** A read() was requested while autoRead is off (event loop only). */
    private boolean readPending;
    /** The pipeline is handling received bytes right now (event loop only): writes then are replies. */
    private boolean delivering;
    /** A reply was written while delivering: it leaves when the delivery ends, not at the tick (event loop only). */
    private boolean replyWritten;
    /** The first frame (the handshake) has been looked at (event loop only). */
    private boolean handshakeSeen;
    /** A server-list status connection (handshake next state 1): every write leaves at once (event loop only). */
    private boolean statusConnection;

    public MoonBridgeChannel() {
        super(null);
    }

    /** Ends the game tick on every open MoonBridge channel: each sends this tick's packets as one message. */
    public static void endTickAll() {
        for (MoonBridgeChannel c : OPEN) {
            c.endTick();
        }
    }

    /** The route this channel connects (or connected) through, or {@code null} before connecting. */
    public Routes.Route route() {
        return route;
    }

    /** Open MoonBridge channels (for diagnostics and tests). */
    public static int openCount() {
        return OPEN.size();
    }

    /**
     * Ends the tick on this channel. Runs on the event loop after the writes the game already submitted, so a
     * tick's packets stay in the tick's batch.
     */
    public void endTick() {
        if (state != STATE_ACTIVE) {
            return;
        }
        eventLoop().execute(new Runnable() {
            @Override
            public void run() {
                flushBatch();
            }
        });
    }

    @Override
    public ChannelConfig config() {
        return config;
    }

    @Override
    public boolean isOpen() {
        return state != STATE_CLOSED;
    }

    @Override
    public boolean isActive() {
        return state == STATE_ACTIVE;
    }

    @Override
    public ChannelMetadata metadata() {
        return METADATA;
    }

    @Override
    protected AbstractUnsafe newUnsafe() {
        return new Unsafe();
    }

    @Override
    protected boolean isCompatible(EventLoop loop) {
        return loop instanceof SingleThreadEventLoop;
    }

    @Override
    protected SocketAddress localAddress0() {
        return null;
    }

    @Override
    protected SocketAddress remoteAddress0() {
        return remote;
    }

    @Override
    protected void doBind(SocketAddress localAddress) {
        throw new UnsupportedOperationException("MoonBridgeChannel is a client channel");
    }

    @Override
    protected void doDisconnect() {
        doClose();
    }

    @Override
    protected void doClose() {
        if (state == STATE_CLOSED) {
            return;
        }
        state = STATE_CLOSED;
        OPEN.remove(this);
        ChannelPromise pending = connectPromise;
        connectPromise = null;
        if (pending != null) {
            pending.tryFailure(new java.nio.channels.ClosedChannelException());
        }
        closeInBackground(transport);
        releaseInbound();
        synchronized (readerLock) {
            readerLock.notifyAll();
        }
    }

    /** Closing sends what is queued and waits for the close handshake: never on the event loop. */
    private static void closeInBackground(final NativeTransport t) {
        if (t == null) {
            return;
        }
        Thread closer = new Thread(new Runnable() {
            @Override
            public void run() {
                t.close();
            }
        }, "MoonBridge close");
        closer.setDaemon(true);
        closer.start();
    }

    private void releaseInbound() {
        ByteBuf b;
        while ((b = inbound.poll()) != null) {
            queuedBytes.addAndGet(-b.readableBytes());
            b.release();
        }
    }

    /** Runs {@code task} on the event loop; when the loop is gone, runs {@code orElse} here instead. */
    private void onLoop(Runnable task, Runnable orElse) {
        try {
            eventLoop().execute(task);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            orElse.run();
        }
    }

    @Override
    protected void doBeginRead() {
        if (state == STATE_CLOSED) {
            return;
        }
        readPending = true;
        deliver();
    }

    @Override
    protected void doWrite(ChannelOutboundBuffer in) throws Exception {
        NativeTransport t = transport;
        if (t == null || state != STATE_ACTIVE) {
            throw new NotYetConnectedException();
        }
        boolean wrote = false;
        for (;;) {
            Object msg = in.current();
            if (msg == null) {
                break;
            }
            if (msg instanceof ByteBuf) {
                ByteBuf buf = (ByteBuf) msg;
                if (!handshakeSeen && buf.isReadable()) {
                    handshakeSeen = true;
                    statusConnection = Handshakes.nextState(buf) == 1;
                }
                if (buf.isReadable()) {
                    wrote = true;
                    ByteBuffer nio = buf.nioBufferCount() == 1
                            ? buf.nioBuffer(buf.readerIndex(), buf.readableBytes())
                            : ByteBuffer.wrap(copy(buf));
                    t.write(nio);
                }
                in.remove();
            } else {
                in.remove(new UnsupportedOperationException("MoonBridgeChannel writes ByteBuf only, not "
                        + msg.getClass().getName()));
            }
        }
        if (wrote) {
            if (delivering) {
                replyWritten = true;
            } else if (statusConnection) {
                t.endTick();
            }
        }
    }

    private static byte[] copy(ByteBuf buf) {
        byte[] b = new byte[buf.readableBytes()];
        buf.getBytes(buf.readerIndex(), b);
        return b;
    }

    /** Fires queued chunks into the pipeline when reading is allowed (event loop only). */
    private void deliver() {
        deliveryScheduled.set(false);
        if (state == STATE_CLOSED) {
            releaseInbound(); // chunks the reader added while the channel was closing
            return;
        }
        boolean any = false;
        delivering = true;
        try {
            while (state != STATE_CLOSED && (readPending || config.isAutoRead())) {
                ByteBuf b = inbound.poll();
                if (b == null) {
                    break;
                }
                queuedBytes.addAndGet(-b.readableBytes());
                any = true;
                pipeline().fireChannelRead(b);
            }
            if (any) {
                readPending = false;
                pipeline().fireChannelReadComplete();
                synchronized (readerLock) {
                    readerLock.notifyAll();
                }
            }
        } finally {
            delivering = false;
        }
        if (replyWritten) {
            replyWritten = false;
            flushBatch();
        }
        if (remoteClosed && inbound.isEmpty() && state != STATE_CLOSED) {
            unsafe().close(voidPromise());
        }
    }

    /** Sends the batch written so far now, as one message: the tick's end, or replies (event loop only). */
    private void flushBatch() {
        NativeTransport t = transport;
        if (state != STATE_ACTIVE || t == null) {
            return;
        }
        try {
            t.endTick();
        } catch (IOException e) {
            pipeline().fireExceptionCaught(e);
            unsafe().close(voidPromise());
        }
    }

    private void scheduleDelivery() {
        if (deliveryScheduled.compareAndSet(false, true)) {
            onLoop(new Runnable() {
                @Override
                public void run() {
                    deliver();
                }
            }, new Runnable() {
                @Override
                public void run() {
                    releaseInbound();
                }
            });
        }
    }

    private void readLoop() {
        NativeTransport t = transport;
        ByteBuffer buf = ByteBuffer.allocate(READ_CHUNK);
        try {
            while (state == STATE_ACTIVE) {
                synchronized (readerLock) {
                    while (queuedBytes.get() > MAX_QUEUED_BYTES && state == STATE_ACTIVE) {
                        readerLock.wait(100);
                    }
                }
                buf.clear();
                int n = t.read(buf, 1000);
                if (n == 0) {
                    continue;
                }
                if (n < 0) {
                    remoteClosed = true;
                    scheduleDelivery();
                    return;
                }
                ByteBuf chunk = alloc().heapBuffer(n);
                chunk.writeBytes(buf.array(), 0, n);
                queuedBytes.addAndGet(n);
                inbound.add(chunk);
                scheduleDelivery();
            }
        } catch (final IOException e) {
            if (state == STATE_ACTIVE) {
                onLoop(new Runnable() {
                    @Override
                    public void run() {
                        pipeline().fireExceptionCaught(e);
                        unsafe().close(voidPromise());
                    }
                }, new Runnable() {
                    @Override
                    public void run() {
                        closeInBackground(transport);
                    }
                });
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private final class Unsafe extends AbstractUnsafe {
        @Override
        public void connect(final SocketAddress remoteAddress, SocketAddress localAddress, final ChannelPromise promise) {
            if (!ensureOpen(promise)) {
                return;
            }
            if (state == STATE_CONNECTING) {
                promise.setFailure(new ConnectionPendingException());
                return;
            }
            if (state == STATE_ACTIVE) {
                promise.setFailure(new AlreadyConnectedException());
                return;
            }
            if (!(remoteAddress instanceof InetSocketAddress)) {
                promise.setFailure(new MoonBridgeConnectException("MoonBridge: unsupported address " + remoteAddress, null));
                close(voidPromise());
                return;
            }
            final InetSocketAddress isa = (InetSocketAddress) remoteAddress;
            final Routes.Route route = isa.getAddress() != null ? Routes.forAddress(isa.getAddress(), isa.getPort())
                    : Routes.config(isa.getHostString(), isa.getPort());
            if (route == null) {
                promise.setFailure(new MoonBridgeConnectException(
                        "MoonBridge: no ws:// or wss:// route for " + isa.getHostString() + ":" + isa.getPort(), null));
                close(voidPromise());
                return;
            }
            if (promise.isDone()) {
                close(voidPromise()); // cancelled before it started
                return;
            }
            state = STATE_CONNECTING;
            remote = isa;
            MoonBridgeChannel.this.route = route;
            connectPromise = promise;
            // A cancelled connect promise closes the channel at once; the native connect still running on the
            // connector thread is closed as soon as it returns (within connect_timeout_ms). (1.7.10's "Cancel" on
            // "Connecting..." does not cancel the promise; mods and other callers may.)
            promise.addListener(new io.netty.util.concurrent.GenericFutureListener<io.netty.util.concurrent.Future<Void>>() {
                @Override
                public void operationComplete(io.netty.util.concurrent.Future<Void> f) {
                    if (f.isCancelled()) {
                        onLoop(new Runnable() {
                            @Override
                            public void run() {
                                close(voidPromise());
                            }
                        }, new Runnable() {
                            @Override
                            public void run() {}
                        });
                    }
                }
            });
            Thread connector = new Thread(new Runnable() {
                @Override
                public void run() {
                    connectBlocking(route, promise);
                }
            }, "MoonBridge connect " + isa.getHostString());
            connector.setDaemon(true);
            connector.start();
        }

        private void connectBlocking(Routes.Route route, final ChannelPromise promise) {
            final NativeTransport t;
            try {
                t = NativeTransport.open(route.url, Routes.optionsFor(route));
            } catch (final Throwable e) {
                final String why = e instanceof UnsatisfiedLinkError
                        ? "the MoonBridge native library is not available on this platform (" + e.getMessage() + ")"
                        : e.getMessage();
                final MoonBridgeConnectException failure =
                        new MoonBridgeConnectException("MoonBridge cannot reach " + route.url + ": " + why, e);
                onLoop(new Runnable() {
                    @Override
                    public void run() {
                        connectPromise = null;
                        // Closed before the promise fails, so whoever waits on it sees a closed channel.
                        close(voidPromise());
                        promise.tryFailure(failure);
                    }
                }, new Runnable() {
                    @Override
                    public void run() {
                        promise.tryFailure(failure);
                    }
                });
                return;
            }
            onLoop(new Runnable() {
                @Override
                public void run() {
                    connectPromise = null;
                    if (state != STATE_CONNECTING || !promise.setUncancellable()) {
                        // Closed or cancelled while connecting: the promise already failed or was cancelled, and
                        // the channel never becomes active (no channelActive, no channelInactive).
                        closeInBackground(t);
                        close(voidPromise());
                        return;
                    }
                    // Active before the promise succeeds, as Netty's own channels: its listeners may write.
                    transport = t;
                    state = STATE_ACTIVE;
                    OPEN.add(MoonBridgeChannel.this);
                    promise.trySuccess();
                    pipeline().fireChannelActive();
                    Thread reader = new Thread(new Runnable() {
                        @Override
                        public void run() {
                            readLoop();
                        }
                    }, "MoonBridge reader " + remote.getHostString());
                    reader.setDaemon(true);
                    reader.start();
                }
            }, new Runnable() {
                @Override
                public void run() {
                    closeInBackground(t);
                    promise.tryFailure(new java.nio.channels.ClosedChannelException());
                }
            });
        }
    }

    /** Channel options: the TCP ones the game sets are accepted and ignored. */
    private static final class Config extends DefaultChannelConfig {
        Config(MoonBridgeChannel channel) {
            super(channel);
        }

        @Override
        public <T> boolean setOption(ChannelOption<T> option, T value) {
            if (option == ChannelOption.TCP_NODELAY || option == ChannelOption.IP_TOS
                    || option == ChannelOption.SO_KEEPALIVE || option == ChannelOption.SO_SNDBUF
                    || option == ChannelOption.SO_RCVBUF || option == ChannelOption.SO_LINGER
                    || option == ChannelOption.SO_REUSEADDR) {
                return true;
            }
            return super.setOption(option, value);
        }

        @Override
        public Map<ChannelOption<?>, Object> getOptions() {
            return super.getOptions();
        }
    }
}
