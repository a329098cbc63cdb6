package dev.moonbridge.client;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The real peers of the Java tests: a node-minecraft-protocol 1.7.10 backend ({@code tests/peers/backend.js}),
 * the {@code moonbridge} proxy with a wss listener, and a CA plus leaf certificate made with {@code openssl}.
 * Paths come from the system properties {@code moonbridge.bin} and {@code moonbridge.peers}.
 */
public final class TestPeers implements AutoCloseable {
    public final Path dir;
    public final Path ca;
    public final int wssPort;
    private final List<Process> processes = new ArrayList<>();
    /** Every line the proxy has logged since start. */
    final BlockingQueue<String> proxyLog = new LinkedBlockingQueue<>();

    private TestPeers(Path dir, Path ca, int wssPort) {
        this.dir = dir;
        this.ca = ca;
        this.wssPort = wssPort;
    }

    public String wssUrl() {
        return "wss://localhost:" + wssPort + "/mc";
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
        String bin = requiredProperty("moonbridge.bin");
        String peersDir = requiredProperty("moonbridge.peers");
        Path dir = Files.createTempDirectory("moonbridge-java-it");
        Path ca = dir.resolve("ca.pem");
        Path caKey = dir.resolve("ca.key");
        Path cert = dir.resolve("fullchain.pem");
        Path key = dir.resolve("privkey.pem");
        Path leaf = dir.resolve("leaf.pem");
        Path csr = dir.resolve("leaf.csr");
        Path ext = dir.resolve("leaf.ext");
        Files.write(ext, "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n".getBytes(StandardCharsets.UTF_8));
        run("openssl", "req", "-x509", "-nodes", "-days", "2", "-subj", "/CN=MoonBridge Java Test CA", "-newkey", "ec",
                "-pkeyopt", "ec_paramgen_curve:prime256v1", "-keyout", caKey.toString(), "-out", ca.toString());
        run("openssl", "req", "-new", "-nodes", "-subj", "/CN=localhost", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-keyout", key.toString(), "-out", csr.toString());
        run("openssl", "x509", "-req", "-days", "2", "-in", csr.toString(), "-CA", ca.toString(), "-CAkey", caKey.toString(),
                "-CAcreateserial", "-extfile", ext.toString(), "-out", leaf.toString());
        byte[] chain = concat(Files.readAllBytes(leaf), Files.readAllBytes(ca));
        Files.write(cert, chain);

        int wssPort = freePort();
        TestPeers p = new TestPeers(dir, ca, wssPort);
        try {
            Process backend = p.spawn(new File(peersDir), "node", "backend.js", backendOptions);
            String listening = waitLine(backend.getInputStream(), "\"listening\"", 20);
            int backendPort = Integer.parseInt(listening.replaceAll("[^0-9]", ""));
            Path config = dir.resolve("moonbridge.toml");
            String toml = "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:" + wssPort + "\"\n"
                    + "tls_cert = \"" + cert + "\"\ntls_key = \"" + key + "\"\n"
                    + "[[backend]]\nname = \"survival\"\naddress = \"127.0.0.1:" + backendPort + "\"\n";
            Files.write(config, toml.getBytes(StandardCharsets.UTF_8));
            Process proxy = p.spawn(null, bin, "--config", config.toString());
            p.collect(proxy.getErrorStream());
            p.waitProxyLine("listening wss", 20);
            return p;
        } catch (Exception e) {
            p.close();
            throw e;
        }
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
        long deadline = System.nanoTime() + seconds * 1_000_000_000L;
        while (true) {
            long left = deadline - System.nanoTime();
            String line = left > 0 ? proxyLog.poll(left, TimeUnit.NANOSECONDS) : null;
            if (line == null) {
                throw new IllegalStateException("no proxy log line containing " + needle + " within " + seconds + " s");
            }
            if (line.contains(needle)) {
                return line;
            }
        }
    }

    /** Reads lines on a thread until one contains {@code needle}; keeps draining afterwards. */
    private static String waitLine(java.io.InputStream stream, String needle, int seconds) throws Exception {
        BlockingQueue<String> found = new LinkedBlockingQueue<>();
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(stream, StandardCharsets.UTF_8))) {
                String line;
                boolean sent = false;
                while ((line = r.readLine()) != null) {
                    if (!sent && line.contains(needle)) {
                        found.add(line);
                        sent = true;
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

    private static byte[] concat(byte[] a, byte[] b) {
        byte[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
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
