package dev.moonbridge.client;

/**
 * Connecting failed: the host did not resolve, the server refused or did not answer within
 * {@code connect_timeout_ms} ({@link #code()} {@link #ERR_CONNECT}), the TLS handshake failed ({@link #ERR_TLS}),
 * or the WebSocket upgrade was refused ({@link #ERR_HANDSHAKE}, the message gives the HTTP status).
 */
public class ConnectFailedException extends MoonBridgeException {
    private static final long serialVersionUID = 1L;

    /**
     * @param message the library's error text
     * @param code {@link #ERR_CONNECT}, {@link #ERR_TLS} or {@link #ERR_HANDSHAKE}
     */
    public ConnectFailedException(String message, int code) {
        super(message, code);
    }
}
