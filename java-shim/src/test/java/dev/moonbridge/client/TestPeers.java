package dev.moonbridge.client;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The real peers of the Java tests: a node-minecraft-protocol 1.7.10 backend ({@code tests/peers/backend.js})
 * or a backend of the test's own, the {@code moonbridge} proxy with a wss, a ws, a tcp and an IPv6 ws listener
 * ({@code [::1]}), and a CA plus leaf certificate (for {@code localhost}, {@code 127.0.0.1} and {@code ::1}) made
 * by the workspace's {@code test-certs} helper next to the proxy binary. Paths come from the system properties
 * {@code moonbridge.bin} and {@code moonbridge.peers}.
 */
public final class TestPeers implements AutoCloseable {
    public final Path dir;
    public final Path ca;
    public final int wssPort;
    public final int wsPort;
    public final int tcpPort;
    public final int ws6Port;
    private final List<Process> processes = new ArrayList<>();
    /** Every line the proxy has logged since start. */
    final BlockingQueue<String> proxyLog = new LinkedBlockingQueue<>();
    /** Every line the node backend has printed since start (JSON events). */
    final BlockingQueue<String> backendLog = new LinkedBlockingQueue<>();

    private TestPeers(Path dir, Path ca) throws IOException {
        this.dir = dir;
        this.ca = ca;
        this.wssPort = freePort();
        this.wsPort = freePort();
        this.tcpPort = freePort();
        this.ws6Port = freePort();
    }

    public String wssUrl() {
        return "wss://localhost:" + wssPort + "/mc";
    }

    public String wsUrl() {
        return "ws://127.0.0.1:" + wsPort + "/mc";
    }

    /** The ws listener on {@code [::1]}. */
    public String ws6Url() {
        return "ws://[::1]:" + ws6Port + "/mc";
    }

    /** Options trusting the test CA. */
    public String caOptions() {
        return "{\"ca_file\":" + Mc.json(ca.toString()) + "}";
    }

    static String requiredProperty(String name) {
        String v = System.getProperty(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalStateException("system property " + name + " is not set (scripts/test-all.sh sets it)");
        }
        return v;
    }

    public static TestPeers start() throws Exception {
        return start("{\"port\":0}");
    }

    /** Starts the peers; {@code backendOptions} is the JSON given to backend.js. */
    public static TestPeers start(String backendOptions) throws Exception {
        return start(backendOptions, -1);
    }

    /** Starts the proxy (and certificates) in front of a backend the test runs itself on 127.0.0.1. */
    public static TestPeers startForBackend(int backendPort) throws Exception {
        return start(null, backendPort);
    }

    private static TestPeers start(String backendOptions, int ownBackendPort) throws Exception {
        String bin = requiredProperty("moonbridge.bin");
        Path dir = Files.createTempDirectory("moonbridge-java-it");
        Path ca = dir.resolve("ca.pem");
        Path cert = dir.resolve("fullchain.pem");
        Path key = dir.resolve("privkey.pem");
        TestPeers p = new TestPeers(dir, ca);
        try {
            // ca.pem, fullchain.pem and privkey.pem for localhost, 127.0.0.1 and ::1, from the workspace's test
            // certificate helper (rcgen), built next to the proxy binary.
            run(Paths.get(bin).resolveSibling("test-certs").toString(), dir.toString());
            int backendPort = ownBackendPort;
            if (backendPort < 0) {
                String peersDir = requiredProperty("moonbridge.peers");
                Process backend = p.spawn(new File(peersDir), "node", "backend.js", backendOptions);
                String listening = waitLine(backend.getInputStream(), "\"listening\"", 20, p.backendLog);
                backendPort = Integer.parseInt(listening.replaceAll("[^0-9]", ""));
            }
            Path config = dir.resolve("moonbridge.toml");
            String toml = "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:" + p.wssPort + "\"\n"
                    + "tls_cert = \"" + cert + "\"\ntls_key = \"" + key + "\"\n"
                    + "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:" + p.wsPort + "\"\n"
                    + "[[listener]]\ntransport = \"ws\"\nbind = \"[::1]:" + p.ws6Port + "\"\n"
                    + "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:" + p.tcpPort + "\"\n"
                    + "[[backend]]\nname = \"survival\"\naddress = \"127.0.0.1:" + backendPort + "\"\n"
                    // Every test connection comes from the loopback address: no per-address rate limits.
                    + "[rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n";
            Files.write(config, toml.getBytes(StandardCharsets.UTF_8));
            Process proxy = p.spawn(null, bin, "--config", config.toString());
            p.collect(proxy.getErrorStream());
            p.waitProxyLine("listening tcp", 20);
            return p;
        } catch (Exception e) {
            p.close();
            throw e;
        }
    }

    /** The next backend line containing {@code needle} (earlier lines are consumed). */
    public String waitBackendLine(String needle, int seconds) throws InterruptedException {
        return waitIn(backendLog, needle, seconds, "backend");
    }

    private Process spawn(File cwd, String... cmd) throws IOException {
        ProcessBuilder pb = new ProcessBuilder(cmd);
        if (cwd != null) {
            pb.directory(cwd);
        }
        pb.environment().put("RUST_LOG", "info");
        Process proc = pb.start();
        processes.add(proc);
        return proc;
    }

    private void collect(java.io.InputStream stream) {
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(stream, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    proxyLog.add(line);
                }
            } catch (IOException ignored) {
                // the process ended
            }
        });
        t.setDaemon(true);
        t.start();
    }

    /** The next proxy log line containing {@code needle} (earlier lines are consumed). */
    public String waitProxyLine(String needle, int seconds) throws InterruptedException {
        return waitIn(proxyLog, needle, seconds, "proxy log");
    }

    private static String waitIn(BlockingQueue<String> lines, String needle, int seconds, String what)
            throws InterruptedException {
        long deadline = System.nanoTime() + seconds * 1_000_000_000L;
        while (true) {
            long left = deadline - System.nanoTime();
            String line = left > 0 ? lines.poll(left, TimeUnit.NANOSECONDS) : null;
            if (line == null) {
                throw new IllegalStateException("no " + what + " line containing " + needle + " within " + seconds + " s");
            }
            if (line.contains(needle)) {
                return line;
            }
        }
    }

    /**
     * Reads lines on a thread until one contains {@code needle}; keeps draining afterwards, into {@code rest}
     * (the lines after the one returned).
     */
    private static String waitLine(java.io.InputStream stream, String needle, int seconds, BlockingQueue<String> rest)
            throws Exception {
        BlockingQueue<String> found = new LinkedBlockingQueue<>();
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(stream, StandardCharsets.UTF_8))) {
                String line;
                boolean sent = false;
                while ((line = r.readLine()) != null) {
                    if (!sent && line.contains(needle)) {
                        found.add(line);
                        sent = true;
                    } else if (sent) {
                        rest.add(line);
                    }
                }
            } catch (IOException ignored) {
                // the process ended
            }
        });
        t.setDaemon(true);
        t.start();
        String line = found.poll(seconds, TimeUnit.SECONDS);
        if (line == null) {
            throw new IllegalStateException("no line containing " + needle + " within " + seconds + " s");
        }
        return line;
    }

    private static void run(String... cmd) throws Exception {
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        byte[] out = readAll(p.getInputStream());
        if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException(Arrays.toString(cmd) + " failed: " + new String(out, StandardCharsets.UTF_8));
        }
    }

    private static byte[] readAll(java.io.InputStream in) throws IOException {
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        byte[] buf = new byte[8192];
        int n;
        while ((n = in.read(buf)) > 0) {
            out.write(buf, 0, n);
        }
        return out.toByteArray();
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    /** Stops the peers and deletes their directory (certificates, configuration). */
    @Override
    public void close() {
        for (Process p : processes) {
            p.destroy();
        }
        for (Process p : processes) {
            try {
                if (!p.waitFor(10, TimeUnit.SECONDS)) {
                    p.destroyForcibly();
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        ProbeRunner.deleteTree(dir);
    }
}
