package dev.moonbridge.client;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.DatagramSocket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A real DNS server on loopback for the Java tests: Debian's dnsmasq with only the records a test gives
 * (dnsmasq options such as {@code --txt-record=_moonbridge.mc.example.com,wss://…} or {@code --srv-host=…}),
 * authoritative for {@code example.com} and {@code example.net}, logging every query. The same setup as the Rust
 * tests' {@code tests/src/dns.rs}.
 */
public final class DnsServer implements AutoCloseable {
    public final int port;
    private final Process process;
    private final List<String> log = new CopyOnWriteArrayList<String>();

    private DnsServer(int port, Process process) {
        this.port = port;
        this.process = process;
    }

    public static DnsServer start(String... records) throws Exception {
        int port;
        try (DatagramSocket s = new DatagramSocket(0)) {
            port = s.getLocalPort();
        }
        String bin = new File("/usr/sbin/dnsmasq").isFile() ? "/usr/sbin/dnsmasq" : "dnsmasq";
        List<String> cmd = new ArrayList<String>(Arrays.asList(bin, "--keep-in-foreground", "--conf-file=/dev/null",
                "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts", "--no-poll", "--pid-file=",
                "--log-queries", "--log-facility=-", "--local=/example.com/", "--local=/example.net/", "--local-ttl=60",
                "--port=" + port));
        if ("root".equals(System.getProperty("user.name"))) {
            cmd.add("--user=root"); // keep writing the log to our pipe after binding
        }
        cmd.addAll(Arrays.asList(records));
        Process p = new ProcessBuilder(cmd).redirectOutput(new File("/dev/null")).start();
        DnsServer d = new DnsServer(port, p);
        CountDownLatch ready = new CountDownLatch(1);
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getErrorStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    d.log.add(line);
                    if (line.contains("started")) {
                        ready.countDown();
                    }
                }
            } catch (IOException ignored) {
                // ended
            }
        });
        t.setDaemon(true);
        t.start();
        if (!ready.await(10, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new IllegalStateException("dnsmasq did not start: " + d.log);
        }
        return d;
    }

    /** {@code IP:port} for the native library's discovery. */
    public String address() {
        return "127.0.0.1:" + port;
    }

    /** The JNDI provider URL for vanilla's SRV lookup in the fixtures. */
    public String jndiUrl() {
        return "dns://127.0.0.1:" + port;
    }

    /**
     * How many queries of {@code type} ({@code TXT}, {@code SRV}) for {@code name} arrived. dnsmasq logs
     * asynchronously, so this first sends a query of its own and waits for its log line: every query sent before
     * is counted by then.
     */
    public int queries(String type, String name) throws Exception {
        sync();
        int n = 0;
        for (String l : log) {
            if (l.contains("query[" + type + "] " + name + " ")) {
                n++;
            }
        }
        return n;
    }

    private static final java.util.concurrent.atomic.AtomicInteger SEQ = new java.util.concurrent.atomic.AtomicInteger();

    /** Sends an A query for a fresh name and waits (10 s at most) until dnsmasq has logged it. */
    private void sync() throws Exception {
        String label = "sync-" + SEQ.getAndIncrement();
        java.io.ByteArrayOutputStream q = new java.io.ByteArrayOutputStream();
        q.write(new byte[] {0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0});
        for (String part : new String[] {label, "example", "com"}) {
            q.write(part.length());
            q.write(part.getBytes(StandardCharsets.US_ASCII));
        }
        q.write(new byte[] {0, 0, 1, 0, 1});
        byte[] query = q.toByteArray();
        try (DatagramSocket s = new DatagramSocket()) {
            s.send(new java.net.DatagramPacket(query, query.length, java.net.InetAddress.getByName("127.0.0.1"), port));
        }
        String needle = "query[A] " + label + ".example.com ";
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (true) {
            for (String l : log) {
                if (l.contains(needle)) {
                    return;
                }
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("dnsmasq did not log " + needle);
            }
            Thread.sleep(5); // polling the log, bounded by the deadline
        }
    }

    @Override
    public void close() {
        process.destroy();
    }
}
