package dev.moonbridge.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/** Minimal Minecraft 1.7.10 (protocol 5) framing for the tests: VarInt frames over a NativeTransport. */
final class Mc {
    static final class Frame {
        final int id;
        final byte[] body;

        Frame(int id, byte[] body) {
            this.id = id;
            this.body = body;
        }
    }

    private final NativeTransport t;
    private final ByteBuffer in = ByteBuffer.allocate(4 << 20);

    Mc(NativeTransport t) {
        this.t = t;
        in.flip();
    }

    /** Byte i of burst message n, as tests/peers/common.js builds it. */
    static byte[] burstPayload(int n, int size) {
        byte[] b = new byte[size];
        for (int i = 0; i < size; i++) {
            b[i] = (byte) ((n * 131 + i * 7 + (i >> 8)) & 0xff);
        }
        return b;
    }

    static String json(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static void varInt(ByteArrayOutputStream out, int v) {
        while ((v & ~0x7f) != 0) {
            out.write((v & 0x7f) | 0x80);
            v >>>= 7;
        }
        out.write(v);
    }

    static byte[] string(String s) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        varInt(out, b.length);
        out.write(b, 0, b.length);
        return out.toByteArray();
    }

    static byte[] frame(int id, byte[] fields) {
        ByteArrayOutputStream body = new ByteArrayOutputStream();
        varInt(body, id);
        body.write(fields, 0, fields.length);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        varInt(out, body.size());
        byte[] b = body.toByteArray();
        out.write(b, 0, b.length);
        return out.toByteArray();
    }

    static byte[] handshakeAndLogin(String name, boolean forge) {
        ByteArrayOutputStream hs = new ByteArrayOutputStream();
        varInt(hs, 5);
        byte[] host = string("mc.example.com" + (forge ? "\0FML\0" : ""));
        hs.write(host, 0, host.length);
        hs.write(0x63);
        hs.write(0xdd);
        varInt(hs, 2);
        byte[] a = frame(0x00, hs.toByteArray());
        byte[] b = frame(0x00, string(name));
        byte[] all = new byte[a.length + b.length];
        System.arraycopy(a, 0, all, 0, a.length);
        System.arraycopy(b, 0, all, a.length, b.length);
        return all;
    }

    void login(String name, boolean forge) throws IOException {
        t.write(ByteBuffer.wrap(handshakeAndLogin(name, forge)));
        t.endTick();
    }

    void send(int id, byte[] fields) throws IOException {
        t.write(ByteBuffer.wrap(frame(id, fields)));
    }

    /** The next frame, reading more as needed (30 s at most). */
    Frame next() throws IOException {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (true) {
            Frame f = tryFrame();
            if (f != null) {
                return f;
            }
            if (System.nanoTime() > deadline) {
                throw new IOException("no frame within 30 s");
            }
            in.compact();
            int r = t.read(in, 1000);
            in.flip();
            if (r < 0) {
                throw new IOException("closed");
            }
        }
    }

    private Frame tryFrame() {
        in.mark();
        int len = 0;
        for (int i = 0; ; i++) {
            if (!in.hasRemaining() || i == 3) {
                in.reset();
                return null;
            }
            int b = in.get() & 0xff;
            len |= (b & 0x7f) << (7 * i);
            if ((b & 0x80) == 0) {
                break;
            }
        }
        if (in.remaining() < len) {
            in.reset();
            return null;
        }
        byte[] body = new byte[len];
        in.get(body);
        Reader r = new Reader(body);
        int id = r.varInt();
        byte[] rest = new byte[body.length - r.pos];
        System.arraycopy(body, r.pos, rest, 0, rest.length);
        return new Frame(id, rest);
    }

    static final class Reader {
        final byte[] b;
        int pos;

        Reader(byte[] b) {
            this.b = b;
        }

        int varInt() {
            int v = 0;
            for (int i = 0; i < 5; i++) {
                int x = b[pos++] & 0xff;
                v |= (x & 0x7f) << (7 * i);
                if ((x & 0x80) == 0) {
                    return v;
                }
            }
            throw new IllegalStateException("VarInt too long");
        }

        String string() {
            int n = varInt();
            String s = new String(b, pos, n, StandardCharsets.UTF_8);
            pos += n;
            return s;
        }

        byte[] i16Bytes() {
            int n = ((b[pos] & 0xff) << 8) | (b[pos + 1] & 0xff);
            pos += 2;
            byte[] out = new byte[n];
            System.arraycopy(b, pos, out, 0, n);
            pos += n;
            return out;
        }
    }
}
