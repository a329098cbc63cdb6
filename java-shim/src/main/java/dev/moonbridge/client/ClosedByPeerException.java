package dev.moonbridge.client;

/**
 * The server (or the proxy) closed the connection with a WebSocket close code other than 1000 or 1001 (an
 * orderly close is not an exception: {@link NativeTransport#read} returns -1), or a write came after the peer
 * closed. {@link #code()} is {@link #ERR_CLOSED}.
 */
public class ClosedByPeerException extends MoonBridgeException {
    private static final long serialVersionUID = 1L;

    private final int closeCode;

    /**
     * @param message the library's error text (names the close code and reason)
     * @param closeCode the RFC 6455 close code (section 7.4), or -1 when there was none (TCP, or a close without a
     *     code)
     */
    public ClosedByPeerException(String message, int closeCode) {
        super(message, ERR_CLOSED);
        this.closeCode = closeCode;
    }

    /** The RFC 6455 close code (for example 1011 when the proxy lost the game server), or -1 when none. */
    public int closeCode() {
        return closeCode;
    }
}
