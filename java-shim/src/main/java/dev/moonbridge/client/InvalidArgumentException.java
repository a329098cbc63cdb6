package dev.moonbridge.client;

/**
 * A bad argument: a URL that is not {@code tcp://}, {@code ws://} or {@code wss://}, invalid options JSON, a
 * null or out-of-range argument. Only the call fails.
 * {@link #code()} is {@link #ERR_INVALID_ARGUMENT}.
 */
public class InvalidArgumentException extends MoonBridgeException {
    private static final long serialVersionUID = 1L;

    /**
     * @param message the library's error text
     * @param code {@link #ERR_INVALID_ARGUMENT}
     */
    public InvalidArgumentException(String message, int code) {
        super(message, code);
    }
}
