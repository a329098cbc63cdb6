package dev.moonbridge.client.netty;

import io.netty.buffer.ByteBuf;

/**
 * Reads the next state from a protocol 5 handshake frame (wiki.vg, Handshaking: VarInt frame length, VarInt
 * packet id 0x00, VarInt protocol version, String server address (VarInt byte length + UTF-8), unsigned short
 * port, VarInt next state: 1 status, 2 login), without moving the buffer's indexes.
 */
final class Handshakes {
    private Handshakes() {}

    /** The handshake's next state, or -1 when {@code frame} does not start with a whole handshake frame. */
    static int nextState(ByteBuf frame) {
        int[] pos = {frame.readerIndex()};
        int end = frame.writerIndex();
        int length = varInt(frame, pos, end);
        if (length <= 0 || pos[0] + length > end) {
            return -1;
        }
        int frameEnd = pos[0] + length;
        if (varInt(frame, pos, frameEnd) != 0 || varInt(frame, pos, frameEnd) < 0) {
            return -1; // not packet 0x00, or no protocol version
        }
        int hostLength = varInt(frame, pos, frameEnd);
        if (hostLength < 0 || pos[0] + hostLength + 2 > frameEnd) {
            return -1;
        }
        pos[0] += hostLength + 2; // the address and the port
        return varInt(frame, pos, frameEnd);
    }

    /** A VarInt at {@code pos[0]} (advanced past it), or -1 when it is cut short, longer than 5 bytes or negative. */
    private static int varInt(ByteBuf b, int[] pos, int end) {
        int value = 0;
        for (int i = 0; i < 5; i++) {
            if (pos[0] >= end) {
                return -1;
            }
            int x = b.getByte(pos[0]++);
            value |= (x & 0x7f) << (7 * i);
            if ((x & 0x80) == 0) {
                return value < 0 ? -1 : value;
            }
        }
        return -1;
    }
}
