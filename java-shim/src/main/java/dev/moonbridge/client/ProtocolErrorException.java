package dev.moonbridge.client;

/**
 * The server broke the WebSocket protocol (RFC 6455) or MoonBridge carriage version 1, for example with a
 * text message or a malformed frame. The connection has ended. {@link #code()} is {@link #ERR_IO}.
 */
public class ProtocolErrorException extends MoonBridgeException {
    private static final long serialVersionUID = 1L;

    /**
     * @param message the library's error text
     * @param code {@link #ERR_IO}
     */
    public ProtocolErrorException(String message, int code) {
        super(message, code);
    }
}
