package dev.moonbridge.client;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ReadOnlyBufferException;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A connection through the MoonBridge native client library: {@code tcp://host:port},
 * {@code ws://host[:port]/path} or {@code wss://host[:port]/path} (TLS 1.2/1.3).
 *
 * <p>Bytes written between two {@link #endTick()} calls leave as one WebSocket message (or one TCP write), so
 * the game's packets of one tick cost one message. {@link #write(ByteBuffer)} never blocks on the network;
 * {@link #read(ByteBuffer, int)} blocks up to its timeout. Reads and writes may happen on different threads.
 * Options are a JSON object, every key optional: {@code coalesce} ("tick" or "off"), {@code max_delay_ms},
 * {@code max_batch_bytes}, {@code max_pending_bytes}, {@code tls_versions} (["1.2","1.3"]), {@code ca_file},
 * {@code server_name}, {@code connect_timeout_ms}, {@code ping_interval_ms}, {@code subprotocol} (true), {@code resume}
 * (true: a dropped WebSocket is resumed on a new one, docs/carriage.md), {@code compress} (true: WebSocket messages
 * are zstd-compressed when the proxy agrees, docs/carriage.md "Compression").
 *
 * <p>Errors. Every method declares {@link IOException} and throws a {@link MoonBridgeException} of the error's
 * kind, each carrying the library's text and C result code ({@link MoonBridgeException#code()}):
 * <ul>
 *   <li>{@link InvalidArgumentException}: a bad URL or options, a null argument; only that call fails;
 *   <li>{@link ConnectFailedException}: DNS, refused, connect timeout, TLS, WebSocket upgrade refused;
 *   <li>{@link ClosedByPeerException}: the peer closed with a close code other than 1000/1001
 *       ({@link ClosedByPeerException#closeCode()}), or a write after the peer closed;
 *   <li>{@link ProtocolErrorException}: the server broke the WebSocket protocol or carriage;
 *   <li>{@link MoonBridgeException} itself: the server went silent ({@code ERR_TIMEOUT}), stopped accepting data
 *       ({@code ERR_TIMEOUT}), the send buffer is full ({@code ERR_IO}, only that write fails), another I/O
 *       error, the transport was closed by this side ({@code ERR_CLOSED}), or a library bug ({@code ERR_PANIC}).
 * </ul>
 */
public final class NativeTransport implements AutoCloseable {
    private final long handle;
    private final AtomicBoolean closed = new AtomicBoolean();

    private NativeTransport(long handle) {
        this.handle = handle;
    }

    /**
     * Connects. Loads the native library first ({@link NativeLoader#load()}).
     *
     * @param url the server URL
     * @param optionsJson the options, or {@code null} for the defaults
     * @return the open transport
     * @throws IOException {@link InvalidArgumentException} for a bad URL or options; {@link ConnectFailedException}
     *     with the library's reason: DNS failure, refused or timed out, TLS failure (naming the reason), WebSocket
     *     upgrade refused (with its HTTP status)
     */
    public static NativeTransport open(String url, String optionsJson) throws IOException {
        if (url == null) {
            throw new InvalidArgumentException("url is null", MoonBridgeException.ERR_INVALID_ARGUMENT);
        }
        NativeLoader.load();
        return new NativeTransport(nativeOpen(url, optionsJson));
    }

    /**
     * Route discovery: the MoonBridge URL published for {@code host} in the DNS TXT record
     * {@code _moonbridge.<host>}, or {@code null} when there is none. Loads the library first. Answers are cached
     * for the record's TTL by the library; the lookup takes at most about {@code timeoutMillis}.
     *
     * @param resolver {@code IP:port} of the DNS server to ask instead of the system's (tests), or {@code null}
     * @throws IOException {@link MoonBridgeException} when the lookup failed (timeout, no DNS server): callers
     *     treat it as "no record"; {@link InvalidArgumentException} for a bad resolver address
     */
    public static String discover(String host, String resolver, int timeoutMillis) throws IOException {
        if (host == null) {
            throw new InvalidArgumentException("host is null", MoonBridgeException.ERR_INVALID_ARGUMENT);
        }
        NativeLoader.load();
        return discover0(host, resolver, timeoutMillis);
    }

    /** The native library's version; loads the library first. */
    public static String nativeVersion() {
        NativeLoader.load();
        return version0();
    }

    /**
     * Queues all of {@code src.remaining()} bytes (heap or direct buffer) and advances its position.
     *
     * @throws IOException when the connection has ended (the exception of how it ended), or
     *     {@link MoonBridgeException} with {@code ERR_IO} when the send buffer is full (only this write fails)
     */
    public void write(ByteBuffer src) throws IOException {
        ensureOpen();
        int n = src.remaining();
        if (n == 0) {
            return;
        }
        int pos = src.position();
        if (src.isDirect()) {
            nativeWriteDirect(handle, src, pos, n);
        } else if (src.hasArray()) {
            nativeWriteArray(handle, src.array(), src.arrayOffset() + pos, n);
        } else {
            byte[] copy = new byte[n];
            src.duplicate().get(copy);
            nativeWriteArray(handle, copy, 0, n);
        }
        src.position(pos + n);
    }

    /**
     * Ends the game tick: the bytes written since the last call leave now, as one message.
     *
     * @throws IOException when the connection has ended (the exception of how it ended)
     */
    public void endTick() throws IOException {
        ensureOpen();
        nativeEndTick(handle);
    }

    /**
     * Reads received bytes into {@code dst} (heap or direct), waiting up to {@code timeoutMillis} (0: do not wait;
     * negative: until data or the end), and advances its position.
     *
     * @return the number of bytes read, 0 on timeout, -1 after an orderly close (TCP EOF, WebSocket 1000/1001)
     * @throws IOException {@link ClosedByPeerException} when the peer closed with another close code,
     *     {@link ProtocolErrorException}, or {@link MoonBridgeException} ({@code ERR_TIMEOUT} for a silent server)
     */
    public int read(ByteBuffer dst, int timeoutMillis) throws IOException {
        ensureOpen();
        if (dst.isReadOnly()) {
            throw new ReadOnlyBufferException();
        }
        int n = dst.remaining();
        if (n == 0) {
            return 0;
        }
        int pos = dst.position();
        int r;
        if (dst.isDirect()) {
            r = nativeReadDirect(handle, dst, pos, n, timeoutMillis);
        } else {
            r = nativeReadArray(handle, dst.array(), dst.arrayOffset() + pos, n, timeoutMillis);
        }
        if (r > 0) {
            dst.position(pos + r);
        }
        return r;
    }

    /** True until {@link #close()}. */
    public boolean isOpen() {
        return !closed.get();
    }

    /** Sends what is queued, closes the connection and frees it. Idempotent. */
    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            nativeClose(handle);
        }
    }

    private void ensureOpen() throws IOException {
        if (closed.get()) {
            throw new MoonBridgeException("MoonBridge transport is closed", MoonBridgeException.ERR_CLOSED);
        }
    }

    private static native long nativeOpen(String url, String optionsJson) throws IOException;

    private static native void nativeWriteArray(long handle, byte[] src, int offset, int length) throws IOException;

    private static native void nativeWriteDirect(long handle, ByteBuffer src, int position, int length) throws IOException;

    private static native void nativeEndTick(long handle) throws IOException;

    private static native int nativeReadArray(long handle, byte[] dst, int offset, int length, int timeoutMillis)
            throws IOException;

    private static native int nativeReadDirect(long handle, ByteBuffer dst, int position, int length, int timeoutMillis)
            throws IOException;

    private static native void nativeClose(long handle);

    private static native String version0();

    private static native String discover0(String host, String resolver, int timeoutMillis) throws IOException;
}
