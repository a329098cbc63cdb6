package dev.moonbridge.client.netty;

import java.io.IOException;

/**
 * A failed MoonBridge connection. Its {@link #toString()} is just the message, because the game shows
 * {@code exception.toString()} on its "Failed to connect to the server" screen.
 */
public class MoonBridgeConnectException extends IOException {
    private static final long serialVersionUID = 1L;

    public MoonBridgeConnectException(String message, Throwable cause) {
        super(message, cause);
    }

    @Override
    public String toString() {
        return getMessage();
    }
}
