package dev.moonbridge.client;

import java.io.IOException;

/**
 * An error of the MoonBridge native library. Every exception {@link NativeTransport} throws is one of these:
 * {@link ConnectFailedException}, {@link ClosedByPeerException}, {@link ProtocolErrorException},
 * {@link InvalidArgumentException}, or this class itself for the rest (timeouts, a full send buffer, I/O errors,
 * a transport closed by this side, a bug in the library). It stays an {@link IOException}, so code written
 * against the game's networking keeps working.
 */
public class MoonBridgeException extends IOException {
    private static final long serialVersionUID = 1L;

    /** {@code MB_ERR_INVALID_ARGUMENT} (-1): a bad URL, bad options or another bad argument. */
    public static final int ERR_INVALID_ARGUMENT = -1;
    /** {@code MB_ERR_CONNECT} (-2): DNS failure, connection refused, connect timeout. */
    public static final int ERR_CONNECT = -2;
    /** {@code MB_ERR_TLS} (-3): the TLS handshake failed. */
    public static final int ERR_TLS = -3;
    /** {@code MB_ERR_HANDSHAKE} (-4): the WebSocket upgrade was refused or failed. */
    public static final int ERR_HANDSHAKE = -4;
    /** {@code MB_ERR_CLOSED} (-5): the connection is closed. */
    public static final int ERR_CLOSED = -5;
    /** {@code MB_ERR_TIMEOUT} (-6): the server went silent, or accepted no data for the write-stall time. */
    public static final int ERR_TIMEOUT = -6;
    /** {@code MB_ERR_IO} (-7): an I/O or protocol error, or the send buffer is full. */
    public static final int ERR_IO = -7;
    /** {@code MB_ERR_PANIC} (-8): a bug in the native library. */
    public static final int ERR_PANIC = -8;

    private final int code;

    /**
     * @param message the library's error text
     * @param code the C result code ({@code MB_ERR_*}, one of the {@code ERR_*} constants)
     */
    public MoonBridgeException(String message, int code) {
        super(message);
        this.code = code;
    }

    /** The C result code of this error, one of the {@code ERR_*} constants. */
    public int code() {
        return code;
    }
}
